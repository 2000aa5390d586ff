import outbox


def place(conn: object) -> None:
    outbox.write(conn, aggregate_type="Order", aggregate_id="1", operation="POST", paylod={})
