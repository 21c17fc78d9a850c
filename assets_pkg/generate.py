"""Deterministic demo landing data: the same seed gives the same batches, byte for byte in content.

It exercises everything the pipeline must survive: duplicate deliveries, corrections landing days later (some
moving an item to another day), late-arriving rows, product status changes (some landing late) and, only when
asked, bad rows.
"""

import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from assets_pkg.sources import ORDER_ITEMS, PRODUCTS
from exact_backfills.landing import land

CHANNELS = ["web", "app", "store", "partner"]
CATEGORIES = ["books", "garden", "toys", "kitchen", "sports"]
CENT = Decimal("0.01")


def _ts(day: date, hour: int, second: int = 0) -> datetime:
    return datetime.combine(day, time(hour), tzinfo=UTC) + timedelta(seconds=second)


def _money(x: Decimal) -> Decimal:
    return Decimal(x).quantize(CENT)


@dataclass
class LandingSummary:
    order_item_rows: int = 0
    product_rows: int = 0
    duplicates: int = 0
    corrections: int = 0
    moved_days: int = 0
    late_rows: int = 0
    bad_rows: int = 0
    product_changes: int = 0
    batches: list = field(default_factory=list)


def _writable(schema: T.StructType) -> T.StructType:
    # Bad rows break the contract on purpose (null keys): the files themselves carry no NOT NULL constraint.
    return T.StructType(
        [T.StructField(f.name, f.dataType, True) for f in schema.fields] + [T.StructField("ingest_date", T.DateType())]
    )


def _item(
    rng: random.Random, order_id: int, item_id: int, day: date, customer_id: int, channel: str, products: list[Decimal]
) -> list[Any]:
    product_id = rng.randint(1, len(products))
    quantity = rng.randint(1, 5)
    gross = _money(products[product_id - 1] * quantity)
    discount = _money(gross * Decimal(rng.choice(["0", "0", "0.05", "0.1"])))
    cost = _money(gross * Decimal("0.6"))
    return [order_id, item_id, day, customer_id, product_id, channel, quantity, gross, discount, cost]


def _spoil(rng: random.Random, row: list[Any]) -> list[Any]:
    """Make one row break the contract in one of the ways quarantine must catch."""
    kind = rng.choice(["null_key", "null_date", "negative_quantity", "negative_amount", "out_of_range_date"])
    row = list(row)
    if kind == "null_key":
        row[0] = None
    elif kind == "null_date":
        row[2] = None
    elif kind == "negative_quantity":
        row[6] = -row[6]
    elif kind == "negative_amount":
        row[7] = -row[7]
    else:
        row[2] = date(1900, 1, 1)
    return row


def order_item_batches(
    start: date, end: date, seed: int, rows_per_day: int, bad_rate: float, products: list[Decimal], s: LandingSummary
) -> list[list[Any]]:
    rng = random.Random(seed)
    rows: list[list[Any]] = []  # contract columns + ingest_date

    def land(item: list[Any], updated_at: datetime, ingest_day: date, minute: int = 0) -> None:
        ingested_at = _ts(ingest_day, 1) + timedelta(minutes=minute)
        rows.append([*item, updated_at, ingested_at, ingest_day])

    order_id = 0
    for d_idx in range((end - start).days + 1):
        day = start + timedelta(days=d_idx)
        items = 0
        while items < rows_per_day:
            order_id += 1
            customer_id = rng.randint(1, max(10, rows_per_day * 3))
            channel = rng.choice(CHANNELS)
            for item_id in range(1, rng.randint(1, 4) + 1):
                items += 1
                item = _item(rng, order_id, item_id, day, customer_id, channel, products)
                updated_at = _ts(day, 8, rng.randint(0, 12 * 3600))
                ingest_day = day + timedelta(days=1)
                if rng.random() < bad_rate:
                    item = _spoil(rng, item)
                    s.bad_rows += 1
                elif rng.random() < 0.03:
                    ingest_day = day + timedelta(days=rng.randint(2, 10))
                    s.late_rows += 1
                land(item, updated_at, ingest_day)
                roll = rng.random()
                if roll < 0.02:  # delivered twice in the same batch
                    land(item, updated_at, ingest_day)
                    s.duplicates += 1
                elif roll < 0.03:  # re-sent with the next batch
                    land(item, updated_at, ingest_day + timedelta(days=1), minute=5)
                    s.duplicates += 1
                elif roll < 0.06 and item[0] is not None and item[2] is not None and item[6] > 0 and item[7] > 0:
                    fix_day = ingest_day + timedelta(days=rng.randint(1, 14))
                    fixed = list(item)
                    fixed[6] = item[6] + 1
                    fixed[7] = _money(item[7] / item[6] * fixed[6])
                    fixed[8] = _money(fixed[7] * Decimal("0.05"))
                    fixed[9] = _money(fixed[7] * Decimal("0.6"))
                    if rng.random() < 0.2:  # the correction moves the item to another day
                        moved = day + timedelta(days=rng.choice([-2, -1, 1, 2]))
                        fixed[2] = min(max(moved, start), end)
                        s.moved_days += fixed[2] != day
                    land(fixed, _ts(fix_day, 0, 30), fix_day, minute=10)
                    s.corrections += 1
    s.order_item_rows = len(rows)
    return rows


def product_batches(
    start: date, end: date, seed: int, n_products: int, s: LandingSummary
) -> tuple[list[list[Any]], list[Decimal]]:
    rng = random.Random(seed + 1)
    prices = [Decimal(rng.randint(500, 20000)) / 100 for _ in range(n_products)]
    categories = [rng.choice(CATEGORIES) for _ in range(n_products)]
    status = ["ACTIVE"] * n_products
    rows = [
        [pid + 1, categories[pid], "ACTIVE", _money(prices[pid]), _ts(start, 0), _ts(start, 0, 60), start]
        for pid in range(n_products)
    ]
    for d_idx in range(1, (end - start).days + 1):
        day = start + timedelta(days=d_idx)
        if rng.random() < 0.3:
            pid = rng.randrange(n_products)
            status[pid] = "PASSIVE" if status[pid] == "ACTIVE" else "ACTIVE"
            ingest_day = day + timedelta(days=rng.choice([0, 0, 0, 1, 3]))  # some changes land late
            rows.append(
                [
                    pid + 1,
                    categories[pid],
                    status[pid],
                    _money(prices[pid]),
                    _ts(day, 9),
                    _ts(ingest_day, 23),
                    ingest_day,
                ]
            )
            s.product_changes += 1
    s.product_rows = len(rows)
    return rows, prices


def generate(
    spark: SparkSession,
    start: date,
    end: date,
    seed: int = 7,
    rows_per_day: int = 200,
    bad_rate: float = 0.0,
    n_products: int = 60,
) -> LandingSummary:
    if end < start:
        raise ValueError(f"--end {end} is before --start {start}")
    if not 0 <= bad_rate < 1:
        raise ValueError(f"--bad-rate must be in [0, 1), got {bad_rate}")
    s = LandingSummary()
    product_rows, prices = product_batches(start, end, seed, n_products, s)
    item_rows = order_item_batches(start, end, seed, rows_per_day, bad_rate, prices, s)
    products_df = spark.createDataFrame(product_rows, _writable(PRODUCTS.schema))
    items_df = spark.createDataFrame(item_rows, _writable(ORDER_ITEMS.schema))
    s.batches = land({PRODUCTS: products_df, ORDER_ITEMS: items_df})[ORDER_ITEMS.name]
    return s
