# SPDX-License-Identifier: Apache-2.0
"""create_shared_segment(..., alignment=N): aligned blocks and bases.

Real ranks of a torch.distributed gloo group (align_worker.py) agree on
aligned offsets and see each other's writes; a rank declaring another
alignment makes every rank raise naming it.  In one process: the layout's
padding, the default that keeps every existing layout and fingerprint, and
the checks of the argument.
"""

import inspect
from pathlib import Path

import pytest

from conftest import launch_gloo_ranks, leak_check
from mooncake._shared_segment_layout import _build_layout
from mooncake.shared_segment import SharedSegmentError, create_shared_segment

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
BLOCKS = {
    "k": {"count": 6, "shape": (1000, 3), "dtype": "bfloat16"},
    "v": {"count": 6, "shape": (777,), "dtype": "float32"},
}


def launch(scenario, world, **params):
    return launch_gloo_ranks(HERE / "align_worker.py", scenario, world, 120, (), **params)


# 1 GiB would commit 12 GiB here; the C suite checks a 1 GiB base on a small segment.
@pytest.mark.parametrize("alignment", [64 << 10, 2 * MIB])
def test_three_ranks_agree_on_aligned_offsets_and_share_the_pages(alignment):
    results = launch("aligned", 3, alignment=alignment)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, f"rank {rank}: {r['stderr']}"
    first = results[0]
    for r in results:
        assert r["saw_all"]
        assert r["base_mod"] == 0 and set(r["tensor_mods"]) == {0}
        # The base has at least the huge page size, as every memfd segment's always had.
        assert r["info_alignment"] == max(alignment, 2 * MIB) and r["block_alignment"] == alignment
        # Ranks agree on the layout and on the ranges, not on addresses.
        assert (r["offsets"], r["stride"], r["size"], r["ranges"]) == (
            first["offsets"],
            first["stride"],
            first["size"],
            first["ranges"],
        )
    # Each block is padded to one alignment: the cost is that padding and nothing more.
    assert first["stride"] == 2 * alignment
    assert first["offsets"]["k"] == [i * 2 * alignment for i in range(6)]
    assert first["offsets"]["v"] == [i * 2 * alignment + alignment for i in range(6)]
    assert first["size"] == 12 * alignment
    assert first["ranges"] == [[0, 6 * alignment], [6 * alignment, 6 * alignment]]  # JSON pairs


def test_a_rank_declaring_another_alignment_makes_every_rank_raise_naming_it():
    results = launch("mismatch", 3, alignment=2 * MIB, odd=64 << 10, odd_rank=2)
    errors = [r["error"] for r in results]
    assert all(r["returncode"] == 0 for r in results), [r["stderr"] for r in results]
    assert all(errors) and len(set(errors)) == 1, errors
    assert "alignment 65536 on rank 2, 2097152 on rank 0" in errors[0]


def test_the_default_keeps_every_existing_layout():
    specs, offsets, stride, total, tag = _build_layout(BLOCKS)
    assert offsets == {"k": 0, "v": 8192} and stride == 8192 + 4096 and total == 6 * stride
    # 4096 asked for explicitly is the default, layout and all.
    assert _build_layout(BLOCKS, 4096) == (specs, offsets, stride, total, tag)


def test_the_default_and_4096_form_one_group_with_the_old_fingerprint():
    # Two ranks in one process cannot share a gloo group; a native pair checks what complete compares.
    from mooncake import _segment

    total = _build_layout(BLOCKS)[3]
    name = "old|" + _build_layout(BLOCKS)[4]
    with leak_check():
        owner, owner_blob = _segment.SharedSegment.create(name, total, 2, 0)
        peer, peer_blob = _segment.SharedSegment.create(name, total, 2, 1, alignment=4096)
        owner.complete([owner_blob, peer_blob])
        peer.complete([owner_blob, peer_blob])
        odd, odd_blob = _segment.SharedSegment.create(name, total, 2, 1, alignment=8192)
        with pytest.raises(RuntimeError, match="declaration of rank 0 differs"):
            odd.complete([owner_blob, odd_blob])
        for seg in (odd, peer, owner):
            seg.close()


def test_hugetlb_or_thp_segments_report_the_page_size_as_their_default_alignment():
    with leak_check():
        seg = create_shared_segment("default", BLOCKS, 1, 0)
        info = seg.info()
        # Every memfd segment's base has always had the huge page size: the default reports it.
        assert info["alignment"] == 2 * MIB and seg.base_addr() % info["alignment"] == 0
        assert info["block_alignment"] == 4096
        seg.close()


@pytest.mark.parametrize(
    "value",
    [0, 2048, 3 * 4096, (1 << 30) * 2, -4096, 4096.0, "2M", True],
)
def test_bad_alignments_are_clear_errors(value):
    with pytest.raises(SharedSegmentError) as raised:
        create_shared_segment("bad", BLOCKS, 1, 0, alignment=value)
    assert "alignment must be a power of two from 4096 (4 KiB) to 1073741824 (1 GiB)" in str(raised.value)
    assert repr(value) in str(raised.value)


def test_alignment_is_keyword_only_and_last():
    parameters = list(inspect.signature(create_shared_segment).parameters.values())
    assert parameters[-1].name == "alignment" and parameters[-1].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters[-1].default is None


def test_an_alignment_above_the_huge_page_size_moves_the_base():
    # 256 MiB: a base with only the default's 2 MiB would be this aligned one time in 128.
    alignment = 256 * MIB
    with leak_check():
        seg = create_shared_segment(
            "big", {"x": {"count": 1, "shape": (1,), "dtype": "uint8"}}, 1, 0, alignment=alignment
        )
        assert seg.base_addr() % alignment == 0 and seg.info()["alignment"] == alignment
        assert seg.total_size() == alignment  # one byte, padded to one alignment
        seg.close()
