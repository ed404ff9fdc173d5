# SPDX-License-Identifier: Apache-2.0
"""Inputs that used to be coerced or to fail late are refused at create, saying what and how to fix.

Real torch and the real native module: each refusal is checked to leave no
segment behind (no descriptor, no mapping).
"""

import gc

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

import mooncake.shared_segment as shared_segment  # noqa: E402
from mooncake import _segment  # noqa: E402
from mooncake.shared_segment import SharedSegmentError, create_shared_segment  # noqa: E402

ONE = {"count": 2, "shape": (16,), "dtype": torch.float32}


def refused(blocks=None, **kwargs):
    """The message create_shared_segment raises for these arguments (world_size 1)."""
    args = dict(name="kv", blocks=blocks if blocks is not None else {"k": ONE}, world_size=1, rank_id=0)
    args.update(kwargs)
    with pytest.raises(SharedSegmentError) as info:
        create_shared_segment(**args)
    return str(info.value)


@pytest.mark.parametrize("dtype", ["complex256", "object", "float8_e9m9"], ids=str)
def test_unknown_dtypes_are_refused_with_the_accepted_list(dtype, no_leaks):
    # Quantized dtypes are not refused here but in tensors() (test_dtypes.py), as upstream.
    message = refused({"q": {"count": 1, "shape": (8,), "dtype": dtype}})
    assert message.startswith("Block 'q' has an unsupported dtype"), message
    assert "bfloat16, bits16, bits1x8" in message and "float8_e8m0fnu" in message and "uint8" in message


def _dtypes_torch_lacks():
    return [n for n in shared_segment._DTYPE_SIZES if not isinstance(getattr(torch, n, None), torch.dtype)]


def test_a_dtype_this_torch_lacks_is_refused_at_create_not_in_tensors(no_leaks):
    missing = _dtypes_torch_lacks()
    if not missing:
        pytest.skip(f"torch {torch.__version__} has every dtype of the layout table")
    for name in missing:
        message = refused({"f8": {"count": 1, "shape": (8,), "dtype": name}})
        assert f"dtype {name}, which the installed torch {torch.__version__} does not have" in message
        assert "upgrade torch" in message


def test_an_unknown_key_in_a_block_names_it_and_the_accepted_keys(no_leaks):
    message = refused({"k": {"count": 1, "shape": (8,), "dtype": "int8", "dtpye": "int16", "shapes": (2,)}})
    assert "Block 'k' has unknown keys 'dtpye', 'shapes': a block takes count, shape and dtype" in message


@pytest.mark.parametrize("flag", ["mmap", "host_register", "hugetlb"])
@pytest.mark.parametrize("value", ["no", "", 1, None])
def test_flags_are_bools_in_the_native_module_and_the_public_functions(flag, value):
    with pytest.raises(TypeError, match=f"{flag} must be True or False, not"):
        _segment.SharedSegment.supported(**{flag: value})
    with pytest.raises(TypeError, match=f"{flag} must be True or False, not"):
        _segment.SharedSegment.create("flags", 4096, 1, 0, **{flag: value})
    if flag != "host_register":
        with pytest.raises(TypeError, match=f"{flag} must be True or False, not"):
            _segment.room(**{flag: value})
    with pytest.raises(shared_segment.SharedSegmentError, match=f"{flag} must be True or False, got"):
        shared_segment.shared_segment_supported(**{flag: value})


def test_a_dtype_removed_from_torch_is_refused_at_create(monkeypatch, no_leaks):
    # As on an older torch, whatever the installed one has.
    monkeypatch.delattr(torch, "bfloat16")
    message = refused({"k": {"count": 1, "shape": (8,), "dtype": "bfloat16"}})
    assert "dtype bfloat16, which the installed torch" in message


@pytest.mark.parametrize(
    "spec, needle",
    [
        ({"count": 1.5, "shape": (4,), "dtype": "int8"}, "Block 'k' needs integer count and shape: count is 1.5"),
        ({"count": "3", "shape": (4,), "dtype": "int8"}, "count is '3'"),
        ({"count": True, "shape": (4,), "dtype": "int8"}, "count is True"),
        ({"count": 1, "shape": "12", "dtype": "int8"}, "shape is '12', pass a tuple of ints"),
        ({"count": 1, "shape": (2.7, 3), "dtype": "int8"}, "shape is (2.7, 3)"),
        ({"count": 1, "shape": (4,), "dtype": None}, "Block 'k' has dtype None: name one"),
        ({"count": 10**30, "shape": (4,), "dtype": "int8"}, "block 'k' has count 1000000000000000000000000000000"),
        ({"count": 1, "shape": (1 << 40, 1 << 10), "dtype": "int8"}, "block 'k' entries are"),
    ],
    ids=["count-float", "count-str", "count-bool", "shape-str", "shape-float", "dtype-none", "huge-count", "huge"],
)
def test_silent_coercions_and_huge_counts_are_refused_naming_the_block(spec, needle, no_leaks):
    assert needle in refused({"k": spec})


def test_big_endian_numpy_dtypes_are_refused():
    numpy = pytest.importorskip("numpy", reason="numpy is not installed")
    swapped = numpy.dtype("float32").newbyteorder("S")
    message = refused({"k": {"count": 1, "shape": (4,), "dtype": swapped}})
    assert f"byte-swapped numpy dtype {swapped.str!r}" in message and "declare float32" in message
    # Flexible numpy dtypes have no fixed element size.
    for flexible in ("U8", "S", "V16", "O"):
        message = refused({"k": {"count": 1, "shape": (4,), "dtype": numpy.dtype(flexible)}})
        assert message.startswith("Block 'k' has an unsupported dtype"), message
    # The native order is still accepted, under any spelling.
    with create_shared_segment("kv", {"k": {"count": 1, "shape": (4,), "dtype": numpy.dtype("=f4")}}, 1, 0) as seg:
        assert seg.tensors("k")[0].dtype == torch.float32


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"hugetlb": "no"}, "hugetlb must be True or False, got 'no'"),
        ({"mmap": 1}, "mmap must be True or False, got 1"),
        ({"host_register": None}, "host_register must be True or False, got None"),
        ({"name": None}, "name must be a str"),
        ({"rank_id": 0.0}, "rank_id must be an int"),
    ],
)
def test_non_bool_flags_and_none_names_are_refused(kwargs, needle, no_leaks):
    assert needle in refused(**kwargs)


@pytest.mark.parametrize("world_size", [0, -1, 2.0])
def test_world_size_below_one_has_its_own_message(world_size, no_leaks):
    message = refused(world_size=world_size)
    if isinstance(world_size, int):
        # Upstream's text (test_upstream_texts.py), then ours.
        assert message.startswith("comm_group is required when world_size > 1; world_size must be at least 1")
        assert message.endswith(f"got {world_size}")
    else:
        assert message.startswith("world_size must be an int")


def test_offset_index_must_be_an_int():
    with create_shared_segment("kv", {"k": ONE}, 1, 0) as seg:
        assert seg.offset("k", 1) == seg.stride
        with pytest.raises(SharedSegmentError, match=r"offset\('k', 1.5\): the index must be an int"):
            seg.offset("k", 1.5)


def test_with_block_surfaces_the_callers_exception_while_a_view_is_alive():
    with pytest.raises(KeyError, match="the caller's own error") as info:
        with create_shared_segment("kv", {"k": ONE}, 1, 0) as seg:
            view = seg.tensors("k")[0]
            raise KeyError("the caller's own error")
    assert any("stayed open" in note for note in getattr(info.value, "__notes__", ["stayed open"]))
    view.fill_(1.0)  # still mapped
    assert seg._native.exports > 0
    # Without an exception, a live view still makes the exit raise BufferError.
    with pytest.raises(BufferError):
        with seg:
            pass
    del view
    gc.collect()
    seg.close()


def test_native_with_block_surfaces_the_callers_exception_while_a_view_is_alive():
    native, blob = _segment.SharedSegment.create("kv", 4096, 1, 0)
    native.complete([blob])
    with pytest.raises(ValueError, match="mine"):
        with native:
            view = memoryview(native)
            raise ValueError("mine")
    view.release()
    native.close()


def _capability(mmap, host_register):
    return shared_segment._capability_error(mmap, host_register, False, 0)


def test_vmm_capability_error_keeps_upstreams_text_and_adds_the_c_librarys_reason(monkeypatch):
    monkeypatch.delenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", raising=False)
    if shared_segment.shared_segment_supported(mmap=False):
        pytest.skip("this host has an Ascend runtime: mmap=False is supported")
    message = refused(mmap=False)
    assert message.startswith("This mooncake build has no VMM backend for shared segments: ")
    reason = _segment.SharedSegment.why_unsupported(False, False, False, 0)
    assert reason and message.endswith(reason)


def test_host_register_capability_error_keeps_upstreams_text_and_adds_the_c_librarys_reason(monkeypatch):
    monkeypatch.delenv("MOONCAKE_SEGMENT_CUDA_LIBRARY", raising=False)
    monkeypatch.delenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", raising=False)
    if shared_segment.shared_segment_supported(host_register=True):
        pytest.skip("this host has an accelerator runtime with a device: host_register=True is supported")
    message = refused(host_register=True)
    assert message.startswith("This mooncake build cannot HostRegister shared-segment pages: ")
    assert "use host_register=false" in message


def test_hugetlb_by_position_is_hugetlb_by_name(no_leaks):
    # The tenth argument, as upstream's #4152 places it (test_upstream_compat.py has the signature).
    outcomes = []
    for call in (
        lambda: create_shared_segment("kv", {"k": ONE}, 1, 0, 0, None, None, True, False, True),
        lambda: create_shared_segment("kv", {"k": ONE}, 1, 0, hugetlb=True),
    ):
        try:
            with call() as seg:
                outcomes.append(("created", seg.info()["hugetlb"]))
        except SharedSegmentError as exc:
            outcomes.append(("refused", str(exc)))
    assert outcomes[0] == outcomes[1]
    # HugeTLB either way: on its pages, or refused naming them (an empty pool).
    assert outcomes[0] == ("created", True) or "HugeTLB" in outcomes[0][1], outcomes
