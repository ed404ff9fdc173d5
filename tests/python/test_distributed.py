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
    message = assert_same_error_everywhere(
        results,
        "Shared segment create failed: rank 1: InvalidArgument: Shared segment declaration of rank 1 differs from the "
        "local one: ",
        "block 'k' shape (256, 65) on rank 1, (256, 64) on rank 0",
    )
    # Only the odd rank is named: the others agree with each other.
    assert message.count("rank 1:") == 1 and "rank 2:" not in message and "rank 0:" not in message


@pytest.mark.parametrize(
    "field, odd_rank, needle",
    [
        ("count", 2, "block 'v' count 7 on rank 2, 8 on rank 0"),
        ("dtype", 3, "block 'v' dtype bfloat16 on rank 3, float16 on rank 0"),
        ("missing", 1, "block 'v' is declared on rank 0, not on rank 1"),
        ("extra", 2, "block 'a' is declared on rank 2, not on rank 0"),
        ("name", 1, "name 'kv2' on rank 1, 'kv' on rank 0"),
        # The odd one out is found even when it is rank 0.
        ("shape", 0, "block 'k' shape (256, 65) on rank 0, (256, 64) on rank 1"),
    ],
)
def test_a_declaration_mismatch_names_the_block_the_field_and_both_values_on_every_rank(field, odd_rank, needle):
    results = run_ranks("declaration", WORLD, odd_rank=odd_rank, field=field, group_timeout=10)
    message = assert_same_error_everywhere(
        results,
        f"rank {odd_rank}: InvalidArgument: Shared segment declaration of rank {odd_rank} differs from the local one: ",
    )
    assert needle in message, message
    assert all(r["seconds"] < 10 for r in results)


@pytest.mark.parametrize("ranks", [[0, 1, 2], [1]], ids=["every-rank", "one-rank"])
def test_world_size_one_with_a_larger_group_fails_on_every_rank_within_seconds(ranks):
    # Before: every rank owned a private copy (all ranks), or the others waited out the group timeout (one rank).
    results = run_ranks("world_size_one", 3, ranks=ranks, group_timeout=30)
    message = assert_same_error_everywhere(results, "Shared segment create failed: ")
    for rank in ranks:
        assert f"rank {rank}: world_size is 1 but comm_group has 3 ranks; pass world_size=group size" in message
    assert message.count("world_size is 1") == len(ranks)
    assert all(r["seconds"] < 10 for r in results), [r["seconds"] for r in results]


@pytest.mark.parametrize("value", [0, -1])
def test_world_size_below_one_with_a_group_has_its_own_message_on_every_rank(value):
    results = run_ranks("world_size_one", 3, ranks=[2], value=value, group_timeout=30)
    assert_same_error_everywhere(results, "rank 2: world_size must be at least 1 (the number of ranks", f"got {value}")
    assert all(r["seconds"] < 10 for r in results)


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
