"""Two processes claiming the lake_writes pool's one slot at the same instant, on any event log storage (SQLite in
tests/test_dagster_private.py, PostgreSQL in tests/test_cluster_profile.py)."""

import uuid

from exact_backfills.dagster_names import LAKE_WRITES_POOL, PUBLISH_STEP


def claim_while_a_rival_takes_the_slot(storage, rival) -> tuple[bool, str, str]:
    """Claim the pool's one slot for a run of our own, while a rival (another process's storage) takes it between our
    select of the free slot row and our update of it: the moment two processes claiming at once meet. Returns
    whether ours was told it holds the slot, our run id and the rival's."""
    import sqlalchemy

    from exact_backfills.dagster_private import ConcurrencySlotStatus

    our_run, rival_run, armed = str(uuid.uuid4()), str(uuid.uuid4()), [True]

    def before_execute(conn, cursor, statement, *args):
        if armed and statement.lstrip().upper().startswith("UPDATE CONCURRENCY_SLOTS"):
            armed.clear()
            # The rival's step was assigned a slot too (both saw one free): it goes straight to the slot row.
            taken = rival._claim_concurrency_slot(LAKE_WRITES_POOL, rival_run, PUBLISH_STEP)
            assert taken == ConcurrencySlotStatus.CLAIMED

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", before_execute)
    try:
        ours = storage.claim_concurrency_slot(LAKE_WRITES_POOL, our_run, PUBLISH_STEP).is_claimed
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", before_execute)
    assert not armed, "the claim never updated a slot row: Dagster claims differently now"
    return ours, our_run, rival_run


def assert_one_holds_the_slot_and_the_other_gets_it_next(storage, rival) -> None:
    ours, our_run, rival_run = claim_while_a_rival_takes_the_slot(storage, rival)
    try:
        assert not ours
        assert [s.run_id for s in storage.get_concurrency_info(LAKE_WRITES_POOL).claimed_slots] == [rival_run]
        # Once the rival's step ends, ours gets the slot as Dagster's executor asks again.
        rival.free_concurrency_slot_for_step(rival_run, PUBLISH_STEP)
        assert storage.claim_concurrency_slot(LAKE_WRITES_POOL, our_run, PUBLISH_STEP).is_claimed
        assert [s.run_id for s in storage.get_concurrency_info(LAKE_WRITES_POOL).claimed_slots] == [our_run]
    finally:  # the pool as it was, whatever failed: the instance's other runs need its slot
        for run_id in (our_run, rival_run):
            storage.free_concurrency_slots_for_run(run_id)
