"""Landed files written by hand, as a source system would: the order item contract's columns as Arrow types."""

import pyarrow as pa

MONEY = pa.decimal128(18, 2)
ORDER_ITEM_ARROW_TYPES = {
    "order_id": pa.int64(),
    "order_item_id": pa.int32(),
    "order_date": pa.date32(),
    "customer_id": pa.int64(),
    "product_id": pa.int64(),
    "channel": pa.string(),
    "quantity": pa.int32(),
    "gross_amount": MONEY,
    "discount_amount": MONEY,
    "cost_amount": MONEY,
    "updated_at": pa.timestamp("us", tz="UTC"),
    "ingested_at": pa.timestamp("us", tz="UTC"),
}
