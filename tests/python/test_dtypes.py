# SPDX-License-Identifier: Apache-2.0
"""Every dtype torch offers is laid out by its element size, and told apart by its name.

Real torch (whatever version is installed: every dtype it has), a stand-in
for a dtype of a newer torch (a new name and size), real segments, and a
real gloo group for the fingerprint.
"""

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

import mooncake.shared_segment as shared_segment  # noqa: E402
from conftest import NewTorchDtype, run_ranks  # noqa: E402
from mooncake.shared_segment import SharedSegmentError, create_shared_segment  # noqa: E402

SHAPE = (3, 5)


def torch_dtypes():
    """Every dtype the installed torch has, once each (torch.half and torch.float16 are one)."""
    found = {}
    for attr in dir(torch):
        value = getattr(torch, attr)
        if isinstance(value, torch.dtype):
            found[str(value)] = value
    return [found[name] for name in sorted(found)]


def element_size(dtype):
    itemsize = getattr(dtype, "itemsize", None)  # torch >= 2.1
    return itemsize if itemsize is not None else torch.empty(0, dtype=dtype).element_size()


def is_quantized(dtype):
    return str(dtype).startswith(("torch.qint", "torch.quint"))


def tag_of(blocks):
    return shared_segment._build_layout(blocks)[4]


@pytest.mark.parametrize("dtype", torch_dtypes(), ids=str)
def test_every_dtype_of_the_installed_torch_is_laid_out_by_its_element_size(dtype, no_leaks):
    size = element_size(dtype)
    blocks = {"b": {"count": 2, "shape": SHAPE, "dtype": dtype}}
    assert tag_of(blocks) == f"b:2:3x5:{dtype}:{15 * size}"
    with create_shared_segment(f"all-{torch.__version__}", blocks, 1, 0) as seg:
        buffers = seg.buffers("b")
        assert [len(b) for b in buffers] == [15 * size] * 2
        buffers[1][-1] = 0x5A
        del buffers
        if is_quantized(dtype):
            # As upstream, created; only a view is refused (torch 1.13 crashes making one).
            with pytest.raises(SharedSegmentError, match="quantized dtype .* cannot carry its quantizer"):
                seg.tensors("b")
            return
        views = seg.tensors("b")
        assert [(v.dtype, tuple(v.shape)) for v in views] == [(dtype, SHAPE)] * 2
        assert views[1].view(torch.uint8).flatten()[-1] == 0x5A
        del views


def test_a_dtype_of_a_newer_torch_is_laid_out_by_its_itemsize(no_leaks):
    # float8_e8m0fnu came with torch 2.7, float4_e2m1fn_x2 with 2.8; the name here is newer than both.
    scale, wide = NewTorchDtype("float8_e9m0fnu", 1), NewTorchDtype("float24_e8m15", 3)
    blocks = {"s": {"count": 4, "shape": (64,), "dtype": scale}, "w": {"count": 4, "shape": (5,), "dtype": wide}}
    assert tag_of(blocks) == "s:4:64:torch.float8_e9m0fnu:64;w:4:5:torch.float24_e8m15:15"
    with create_shared_segment("newer", blocks, 1, 0) as seg:
        assert (seg.offset("w", 0), seg.stride) == (4096, 8192)
        assert [len(b) for b in seg.buffers("w")] == [15] * 4
        with pytest.raises(SharedSegmentError) as info:
            seg.tensors("s")
        message = str(info.value)
        assert message.startswith("Block 's' has dtype torch.float8_e9m0fnu, of which the installed torch cannot make")
        assert "buffers('s')" in message


@pytest.mark.parametrize("itemsize", [0, None, "1", 1.0], ids=repr)
def test_a_dtype_without_a_fixed_element_size_is_refused(itemsize, no_leaks):
    name = "unsized" if itemsize is None else "float24_e8m15"
    dtype = NewTorchDtype(name, itemsize)
    with pytest.raises(SharedSegmentError) as info:
        create_shared_segment("kv", {"k": {"count": 1, "shape": (8,), "dtype": dtype}}, 1, 0)
    assert str(info.value).startswith(f"Block 'k' has an unsupported dtype torch.{name}: it has no fixed element size")


@pytest.mark.parametrize(
    "name, size",
    [
        ("float8_e8m0fnu", 1),
        ("float4_e2m1fn_x2", 1),
        ("bits8", 1),
        ("bits16", 2),
        ("bits4x2", 1),
        ("uint3", 1),
        ("int7", 1),
        ("uint16", 2),
        ("qint32", 4),
    ],
)
def test_the_dtypes_of_newer_torches_are_sized_by_name_in_the_table(name, size):
    # Names work without torch (test_no_torch.py); a torch that has them sizes them alike.
    assert shared_segment._DTYPE_SIZES[name] == size
    real = getattr(torch, name, None)
    if isinstance(real, torch.dtype):
        assert element_size(real) == size
        assert tag_of({"b": {"count": 1, "shape": (4,), "dtype": name}}) == f"b:1:4:torch.{name}:{4 * size}"


def test_two_dtypes_of_one_size_have_different_layout_tags():
    # The tag is the C fingerprint's input: the name tells same-size dtypes apart.
    tags = {
        tag_of({"b": {"count": 1, "shape": (4,), "dtype": dtype}})
        for dtype in (torch.uint8, torch.int8, torch.qint8, torch.bool, NewTorchDtype("float8_e8m0fnu", 1))
    }
    assert len(tags) == 5, tags


@pytest.mark.parametrize(
    "dtype, needle",
    [
        (("float8_e8m0fnu", 1), "block 'v' dtype float8_e8m0fnu on rank 1, uint8 on rank 0"),
        (("int8", None), "block 'v' dtype int8 on rank 1, uint8 on rank 0"),
        (("qint8", None), "block 'v' dtype qint8 on rank 1, uint8 on rank 0"),
    ],
    ids=["newer-torch", "int8", "qint8"],
)
def test_ranks_declaring_two_dtypes_of_one_size_fail_together(dtype, needle):
    results = run_ranks("same_size_dtypes", 3, odd_rank=1, dtype=dtype)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, f"rank {rank} failed: {r['stderr'][-2000:]}"
    errors = {r["error"] for r in results}
    assert len(errors) == 1 and None not in errors, errors
    message = errors.pop()
    assert message.startswith("Shared segment create failed: rank 1: InvalidArgument: Shared segment declaration")
    assert needle in message
