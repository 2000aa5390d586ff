"""The driver path: the library's rendered statement run through the driver's own cursor.

Any psycopg 3 or psycopg2 connection (binary wheels included), a SQLAlchemy ``Session`` or
``Connection``, and (awaited, in ``outbox._aio``) asyncpg and psycopg's ``AsyncConnection``. The
statement, its validation, naming and id come from the C library (``outbox_render_write``,
``outbox_render_dedupe``); a driver's error is classified by the library's SQLSTATE mapping
(``outbox_status_for_sqlstate``) and its idempotency index name (``outbox_idempotency_index``).
Nothing here decides what the library decides: this module only runs statements and reports.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

from . import _native
from ._config import Config, ConfigLike, as_config
from ._errors import ArgumentTypeError, ConnectionLost, Error, TransactionError, error_class
from ._events import Written

# Transaction states, as libpq names them (PQtransactionStatus), from outbox.h.
IDLE, ACTIVE, INTRANS = _native.TX_IDLE, _native.TX_ACTIVE, _native.TX_INTRANS
INERROR, UNKNOWN = _native.TX_INERROR, _native.TX_UNKNOWN


_DEFAULTS = Config()


class Profile:
    """What a driver path needs of a configuration, derived once per (configuration, placeholder
    style): the native configuration to render with."""

    __slots__ = ("native", "check_order", "placeholders")

    def __init__(self, config: Config, placeholders: str) -> None:
        c = config.copy()
        c["render.placeholders"] = placeholders
        self.native = c.native
        self.placeholders = placeholders
        self.check_order = c["inbox.order_check"] == "true"


def profile(config: ConfigLike, placeholders: str) -> Profile:
    c = as_config(config)
    if c is None:
        c = _DEFAULTS
    p = c._derived.get(placeholders)
    if p is None:
        p = c._derived[placeholders] = Profile(c, placeholders)
    return p


# --------------------------------------------------------------------------- errors


def _cause(exc: BaseException) -> BaseException:
    orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's exception
    return orig if isinstance(orig, BaseException) else exc


def sqlstate_of(exc: BaseException) -> Optional[str]:
    e = _cause(exc)
    s = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)  # psycopg 3, asyncpg / psycopg2
    return s if isinstance(s, str) and len(s) == 5 else None


def constraint_of(exc: BaseException) -> Optional[str]:
    e = _cause(exc)
    diag = getattr(e, "diag", None)
    name = getattr(diag, "constraint_name", None) if diag is not None else getattr(e, "constraint_name", None)
    return name if isinstance(name, str) else None


_LOST_TYPES = ("OperationalError", "InterfaceError", "ConnectionDoesNotExistError", "ConnectionFailureError")


def _lost(exc: BaseException) -> bool:
    """A driver error without a SQLSTATE that says the connection is gone."""
    if getattr(exc, "connection_invalidated", False):  # SQLAlchemy
        return True
    e = _cause(exc)
    return isinstance(e, (OSError, EOFError)) or any(t.__name__ in _LOST_TYPES for t in type(e).__mro__)


def mapped(exc: BaseException, context: str) -> Error:
    """A driver's exception as the library's error: the status is the library's for its SQLSTATE."""
    if isinstance(exc, Error):
        return exc
    state = sqlstate_of(exc)
    if state is None and _lost(exc):
        status = _native.STATUS["CONNECTION"]
    elif state is None and type(exc).__name__ == "PendingRollbackError":  # SQLAlchemy: an aborted transaction
        status = _native.STATUS["TRANSACTION"]
    else:
        status = int(_native.status_for_sqlstate(state))
    e = _cause(exc)
    diag = getattr(e, "diag", None)
    text = (getattr(diag, "message_primary", None) if diag is not None else None) or str(e).strip() or type(e).__name__
    where = f" (SQLSTATE {state})" if state else ""
    hint = "; the caller's transaction is aborted: roll it back first" if state == "25P02" else ""
    return error_class(status)(f"{context}: {text}{where}{hint}", sqlstate=state)


# --------------------------------------------------------------------------- sync drivers


class SyncDriver:
    """How one driver family runs a statement on its connection and reports its transaction."""

    placeholders = "format"

    def state(self, conn: Any) -> int:
        raise NotImplementedError

    def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        raise NotImplementedError

    def savepoint(self, conn: Any, sql: str) -> None:
        self.run(conn, sql, None)

    def autocommit(self, conn: Any) -> bool:
        return bool(conn.autocommit)


_TUPLES_OK = 2  # libpq's PGRES_TUPLES_OK (psycopg.pq.ExecStatus.TUPLES_OK)


class Psycopg3(SyncDriver):
    def state(self, conn: Any) -> int:
        if conn.closed:
            raise ConnectionLost("the psycopg connection is closed")
        return int(conn.info.transaction_status)

    def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        cur = conn.execute(sql, params)
        # Whether rows came back, from the result's status: cur.description would build a Column
        # per field on every call (a few microseconds of each write).
        res = cur.pgresult
        return cur.fetchone() if res is not None and res.status == _TUPLES_OK else None

    def begin(self, conn: Any) -> None:
        if conn.autocommit and int(conn.info.transaction_status) == IDLE:
            conn.execute("BEGIN")

    def commit(self, conn: Any) -> None:
        conn.commit()  # psycopg 3 reads the state from libpq: COMMIT is sent in autocommit too

    def rollback(self, conn: Any) -> None:
        conn.rollback()

    def is_lost(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken) or int(conn.info.transaction_status) == UNKNOWN


class Psycopg2(SyncDriver):
    def state(self, conn: Any) -> int:
        if conn.closed:
            raise ConnectionLost("the psycopg2 connection is closed")
        return int(conn.info.transaction_status)

    def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchone() if cur.description is not None else None

    def begin(self, conn: Any) -> None:
        if conn.autocommit:
            if int(conn.info.transaction_status) == IDLE:
                self.run(conn, "BEGIN", None)
        # else: psycopg2 begins (with its isolation level) at the first statement

    def commit(self, conn: Any) -> None:
        if conn.autocommit:
            self.run(conn, "COMMIT", None)
        else:
            conn.commit()

    def rollback(self, conn: Any) -> None:
        if conn.autocommit:
            if int(conn.info.transaction_status) not in (IDLE, UNKNOWN):
                self.run(conn, "ROLLBACK", None)
        else:
            conn.rollback()

    def is_lost(self, conn: Any) -> bool:
        return bool(conn.closed) or int(conn.info.transaction_status) == UNKNOWN


class SqlAlchemy(SyncDriver):
    """A SQLAlchemy ``Session`` or ``Connection``: statements through ``text()`` in its transaction
    (autobegun as SQLAlchemy does), the savepoint through ``begin_nested()``."""

    placeholders = "named"

    def state(self, conn: Any) -> int:
        return INTRANS  # SQLAlchemy begins a transaction at the first statement (autobegin)

    def autocommit(self, conn: Any) -> bool:
        return False

    def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        from sqlalchemy import text

        res = conn.execute(text(sql), params or {})
        return tuple(res.one()) if res.returns_rows else None

    def begin(self, conn: Any) -> None:
        """SQLAlchemy begins at the first statement (autobegin)."""

    def commit(self, conn: Any) -> None:
        conn.commit()

    def rollback(self, conn: Any) -> None:
        conn.rollback()

    def is_lost(self, conn: Any) -> bool:
        c = conn.connection() if callable(getattr(conn, "connection", None)) else conn  # Session -> Connection
        return bool(getattr(c, "invalidated", False) or getattr(c, "closed", False))


_PSYCOPG3, _PSYCOPG2, _SQLALCHEMY = Psycopg3(), Psycopg2(), SqlAlchemy()


def sync_driver(conn: Any) -> Optional[SyncDriver]:
    """The driver family of a synchronous connection, or None."""
    mod = type(conn).__module__ or ""
    if hasattr(type(conn), "__aenter__") or mod.startswith("asyncpg"):
        return None  # an asyncio connection: outbox.write_async
    if mod.startswith("sqlalchemy."):
        return _SQLALCHEMY
    if (mod == "psycopg" or mod.startswith("psycopg.")) and hasattr(conn, "pgconn"):
        return _PSYCOPG3
    if "psycopg2" in sys.modules:
        import psycopg2.extensions

        if isinstance(conn, psycopg2.extensions.connection):
            return _PSYCOPG2
    if hasattr(conn, "pgconn") and hasattr(conn, "info"):
        return _PSYCOPG3  # a psycopg 3 connection subclass from elsewhere
    return None


def plan_tx(state: int, autocommit: bool) -> int:
    """The transaction state a write plan starts from: outside autocommit a transaction is begun
    by the driver at the first statement, so it is open too."""
    if state == INERROR:
        return INERROR
    return INTRANS if state == INTRANS or not autocommit else IDLE


def failure(exc: BaseException, closed: bool) -> Tuple[Optional[str], Optional[str], str, bool]:
    """A driver's exception as the write plan takes it: (sqlstate, constraint, message, closed)."""
    state = sqlstate_of(exc)
    if state is None and type(exc).__name__ == "PendingRollbackError":  # SQLAlchemy: an aborted transaction
        state = "25P02"
    return state, constraint_of(exc), text_of(exc), closed or (state is None and _lost(exc))


def text_of(exc: BaseException) -> str:
    e = _cause(exc)
    diag = getattr(e, "diag", None)
    return (getattr(diag, "message_primary", None) if diag is not None else None) or str(e).strip() or type(e).__name__


def write(drv: SyncDriver, conn: Any, fields: Tuple[Any, ...], config: ConfigLike) -> Written:
    """outbox.write() through the driver's cursor: the library's write plan (outbox_write_plan_*),
    each statement it hands out run on the driver, in the caller's transaction."""
    prof = profile(config, drv.placeholders)
    plan = _native.WritePlan(prof.native, fields, plan_tx(drv.state(conn), drv.autocommit(conn)), drv.placeholders)
    state = None  # the SQLSTATE of the driver's last error, which the error raised carries
    while True:
        st = plan.next()
        if st is None:
            return result(plan, state)
        step, sql, params = st
        try:
            row = drv.run(conn, sql, params) if step in _ROWS else drv.savepoint(conn, sql)
        except Exception as exc:
            why = failure(exc, _closed(drv, conn))
            state = why[0]
            plan.failed(*why)
            continue
        plan.done(row)


def result(plan: Any, state: Optional[str]) -> Written:
    """The write plan's outcome: what was written, or its error carrying the driver's SQLSTATE."""
    try:
        return Written(*plan.result())
    except Error as e:
        if e.sqlstate is None:
            e.sqlstate = state
        raise


_ROWS = (_native.WRITE_INSERT, _native.WRITE_LOOKUP)


def _closed(drv: Any, conn: Any) -> bool:
    try:
        return bool(drv.is_lost(conn))
    except Exception:
        return True


# --------------------------------------------------------------------------- dedupe


def dedupe_row(prof: Profile, row: Optional[Tuple[Any, ...]], key: Tuple[str, str, Optional[str], Optional[str], int]
               ) -> Tuple[bool, int, int]:
    """(first_time, order, previous_seq) from the rendered dedupe statement's row, read by the
    library's rule (outbox_dedupe_interpret)."""
    if row is None:
        raise Error("outbox dedupe: the inbox statement returned no row")
    first = row[0] is True or row[0] in ("t", "true", 1)
    prev = None if row[1] is None else int(row[1])
    _, _, at, ai, seq = key
    first_time, order, previous = _native.dedupe_interpret(prof.native, at, ai, int(seq or 0), first, prev)
    return bool(first_time), int(order), int(previous)


def render_dedupe(prof: Profile, key: Tuple[str, str, Optional[str], Optional[str], int]) -> Tuple[str, Any]:
    consumer, event_id, at, ai, seq = key
    sql, params = _native.render_dedupe(prof.native, consumer, event_id, at, ai, int(seq or 0))
    return str(sql), params


def dedupe(drv: SyncDriver, conn: Any, config: ConfigLike,
           key: Tuple[str, str, Optional[str], Optional[str], int]) -> Tuple[bool, int, int]:
    """outbox.dedupe() through the driver's cursor, in the connection's transaction."""
    prof = profile(config, drv.placeholders)
    sql, params = render_dedupe(prof, key)
    if not isinstance(drv, SqlAlchemy) and drv.state(conn) == INERROR:
        raise TransactionError("the caller's transaction is aborted; roll it back before deduplicating")
    try:
        row = drv.run(conn, sql, params)
    except Exception as exc:
        raise mapped(exc, "outbox dedupe") from exc
    return dedupe_row(prof, row, key)


# --------------------------------------------------------------------------- asyncio drivers


class _AsyncDriver:
    placeholders = "format"

    def state(self, conn: Any) -> int:
        raise NotImplementedError

    async def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        raise NotImplementedError

    async def simple(self, conn: Any, sql: str) -> None:
        await self.run(conn, sql, None)


class _Asyncpg(_AsyncDriver):
    placeholders = "dollar"

    def state(self, conn: Any) -> int:
        if conn.is_closed():
            raise ConnectionLost("the asyncpg connection is closed")
        return INTRANS if conn.is_in_transaction() else IDLE  # asyncpg: autocommit outside a transaction

    async def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        row = await conn.fetchrow(sql, *(params or ()))
        return tuple(row) if row is not None else None

    async def simple(self, conn: Any, sql: str) -> None:
        await conn.execute(sql)

    async def begin(self, conn: Any) -> None:
        if not conn.is_in_transaction():
            await conn.execute("BEGIN")

    async def commit(self, conn: Any) -> None:
        await conn.execute("COMMIT")

    async def rollback(self, conn: Any) -> None:
        if not conn.is_closed() and conn.is_in_transaction():
            await conn.execute("ROLLBACK")

    def is_lost(self, conn: Any) -> bool:
        return bool(conn.is_closed())

    def autocommit(self, conn: Any) -> bool:
        return True


class _PsycopgAsync(_AsyncDriver):
    def state(self, conn: Any) -> int:
        if conn.closed:
            raise ConnectionLost("the psycopg connection is closed")
        return int(conn.info.transaction_status)

    async def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        cur = await conn.execute(sql, params)
        res = cur.pgresult  # rows came back: as the sync driver checks it (_drivers.Psycopg3.run)
        return await cur.fetchone() if res is not None and res.status == _TUPLES_OK else None

    async def begin(self, conn: Any) -> None:
        if conn.autocommit and int(conn.info.transaction_status) == IDLE:
            await conn.execute("BEGIN")

    async def commit(self, conn: Any) -> None:
        await conn.commit()

    async def rollback(self, conn: Any) -> None:
        await conn.rollback()

    def is_lost(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken) or int(conn.info.transaction_status) == UNKNOWN

    def autocommit(self, conn: Any) -> bool:
        return bool(conn.autocommit)


_ASYNCPG, _PSYCOPG = _Asyncpg(), _PsycopgAsync()


class _SqlAlchemyAsync(_AsyncDriver):
    """A SQLAlchemy ``AsyncSession`` or ``AsyncConnection`` (FastAPI's usual session): statements
    through ``text()`` in its transaction (autobegun as SQLAlchemy does)."""

    placeholders = "named"

    def state(self, conn: Any) -> int:
        return INTRANS  # SQLAlchemy begins a transaction at the first statement (autobegin)

    async def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        from sqlalchemy import text

        res = await conn.execute(text(sql), params or {})
        return tuple(res.one()) if res.returns_rows else None

    async def begin(self, conn: Any) -> None:
        """SQLAlchemy begins at the first statement (autobegin)."""

    async def commit(self, conn: Any) -> None:
        await conn.commit()

    async def rollback(self, conn: Any) -> None:
        await conn.rollback()

    def is_lost(self, conn: Any) -> bool:
        return bool(getattr(conn, "invalidated", False))

    def autocommit(self, conn: Any) -> bool:
        return False


_SQLALCHEMY_ASYNC = _SqlAlchemyAsync()


def async_driver(conn: Any) -> _AsyncDriver:
    mod = type(conn).__module__ or ""
    if mod.startswith("asyncpg"):
        return _ASYNCPG
    if mod.startswith("sqlalchemy.ext.asyncio"):
        return _SQLALCHEMY_ASYNC
    if (mod == "psycopg" or mod.startswith("psycopg.")) and hasattr(type(conn), "__aenter__") and hasattr(conn, "pgconn"):
        return _PSYCOPG
    raise ArgumentTypeError(
        f"cannot await outbox calls on a {mod}.{type(conn).__name__}: pass an asyncpg connection, a "
        "psycopg.AsyncConnection or a SQLAlchemy AsyncSession/AsyncConnection (for a synchronous connection, "
        "call outbox.write)"
    )
