# SPDX-License-Identifier: Apache-2.0
"""Real torch.distributed gloo groups of real processes sharing one segment."""

import pytest

pytest.importorskip("torch", reason="python3-torch is not installed; the gloo tests need it")

from conftest import run_ranks  # noqa: E402

WORLD = 4


def assert_all_ok(results):
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, f"rank {rank} failed: {r['stderr'][-2000:]}"


@pytest.mark.parametrize("owner", [0, 2])
def test_every_rank_aliases_the_same_pages_and_the_group_holds_one_copy(owner):
    results = run_ranks("share", WORLD, owner=owner)
    assert_all_ok(results)
    assert all(r["saw_owner"] for r in results), "a rank did not see the owner's writes"
    assert all(r["saw_all"] for r in results), "a rank did not see another rank's write"
    total_pss = sum(r["pss"] for r in results)
    size = results[0]["total"]
    # One copy of the mapped size: four private copies would be 4x.
    assert 0.95 * size <= total_pss <= 1.05 * size, (total_pss, size)


def assert_same_error_everywhere(results, *needles):
    assert_all_ok(results)
    errors = [r["error"] for r in results]
    assert all(errors), f"some rank did not raise: {errors}"
    assert len(set(errors)) == 1, f"ranks raised different errors: {errors}"
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def test_a_rank_declaring_another_shape_makes_every_rank_raise_the_same_error():
    results = run_ranks("mismatch", WORLD, odd_rank=1)
    message = assert_same_error_everywhere(results, "Shared segment complete failed", "differs from the local one")
    # The odd rank sees every other blob differ, the others see its blob differ.
    assert "rank 1:" in message and "rank 0:" in message


def test_a_local_block_error_does_not_hang_the_others():
    results = run_ranks("local_raise", WORLD, odd_rank=2, group_timeout=5)
    message = assert_same_error_everywhere(
        results, "Shared segment create failed", "rank 2: Block 'k' needs a positive count"
    )
    assert all(r["seconds"] < 5 for r in results)
    assert message.count("rank ") == 1


def test_a_bad_integer_on_one_rank_joins_the_consensus():
    results = run_ranks("bad_int", WORLD, odd_rank=3, group_timeout=5)
    assert_same_error_everywhere(results, "rank 3: ValueError: owner_rank must be >= 0, got -1")


def test_rank_id_that_disagrees_with_the_group_is_named():
    results = run_ranks("wrong_rank_id", WORLD, odd_rank=1, group_timeout=5)
    assert_same_error_everywhere(results, "rank_id is 2 but this process is rank 1 of comm_group")


def test_tp_group_alias_works():
    results = run_ranks("alias", 2, mode="tp_group")
    assert_all_ok(results)
    assert all(r["ok"] for r in results)


def test_tp_group_and_a_different_comm_group_is_an_error_on_every_rank():
    results = run_ranks("alias", 3, mode="both", odd_rank=0)
    assert_same_error_everywhere(results, "pass only comm_group; tp_group is a deprecated alias of comm_group")


def test_a_rank_that_dies_before_the_first_collective_makes_the_others_raise_within_the_timeout():
    results = run_ranks("killed", 3, odd_rank=1, group_timeout=4)
    assert results[1]["returncode"] == 17
    for rank in (0, 2):
        assert results[rank]["returncode"] == 0, results[rank]["stderr"][-2000:]
        assert "the collective over comm_group failed" in results[rank]["error"]
        assert results[rank]["seconds"] < 30
