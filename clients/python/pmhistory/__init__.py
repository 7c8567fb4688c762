"""Client for the prediction-market history API.

Standard library only. Lists walk their cursors for you, exports and lake files are written to
disk in streaming fashion (verified by sha256 for lake files), and `to_dataframe` gives pandas
DataFrames when pandas is installed.

    from pmhistory import Client
    api = Client("http://127.0.0.1:8080", key="pmh_...")      # or PMH_API_URL / PMH_API_KEY
    for m in api.markets(coin=["btc", "eth"], window="15m"):
        print(m["market_id"], m["status"])

The key travels in the Authorization header only; it is never put in a URL or printed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

__all__ = ["Client", "ApiError", "to_dataframe"]
__version__ = "0.1.0"

Time = Union[int, float, str, _dt.datetime, None]
Items = Union[str, Iterable[str], None]

NAMESPACE = "wallet-prediction"
POLYMARKET_COINS = ("btc", "eth", "sol", "xrp")


class ApiError(Exception):
    """An error envelope from the API (or a transport failure, with status 0)."""

    def __init__(self, status: int, code: str, message: str, request_id: Optional[str] = None,
                 details: Optional[list] = None, retry_after: Optional[float] = None):
        super().__init__(f"{status} {code}: {message}" + (f" (request {request_id})" if request_id else ""))
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.details = details or []
        self.retry_after = retry_after


def _time(value: Time) -> Optional[str]:
    """Epoch milliseconds, ISO-8601 text, or a datetime (naive ones are taken as UTC)."""
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return str(int(value.timestamp() * 1000))
    if isinstance(value, (int, float)):
        return str(int(value))
    return str(value)


def _items(value: Items) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return ",".join(value)


class Client:
    def __init__(self, base_url: Optional[str] = None, key: Optional[str] = None, *, timeout: float = 60.0,
                 max_retries: int = 4, namespace: str = NAMESPACE, user_agent: str = f"pmhistory-python/{__version__}"):
        self.base_url = (base_url or os.environ.get("PMH_API_URL") or "http://127.0.0.1:8080").rstrip("/")
        self._key = key or os.environ.get("PMH_API_KEY")
        self.timeout = timeout
        self.max_retries = max_retries
        self.namespace = namespace
        self.user_agent = user_agent

    def __repr__(self) -> str:  # never the key
        return f"Client({self.base_url!r}, namespace={self.namespace!r})"

    # --- transport ---------------------------------------------------------------------------

    def _open(self, path: str, params: Optional[Dict[str, Any]] = None, headers: Optional[Dict[str, str]] = None):
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        url = f"{self.base_url}{path}" + (f"?{query}" if query else "")
        all_headers = {"User-Agent": self.user_agent, "Accept-Encoding": "identity", **(headers or {})}
        if self._key:
            all_headers["Authorization"] = f"Bearer {self._key}"
        attempt = 0
        while True:
            request = urllib.request.Request(url, headers=all_headers, method="GET")
            try:
                return urllib.request.urlopen(request, timeout=self.timeout)
            except urllib.error.HTTPError as err:
                error = self._error(err)
                # Over the rate or shed under load: the server says when to come back.
                if err.code in (429, 503) and attempt < self.max_retries:
                    attempt += 1
                    time.sleep(min(error.retry_after or 2 ** attempt * 0.25, 30))
                    continue
                raise error from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                if attempt < self.max_retries:
                    attempt += 1
                    time.sleep(min(2 ** attempt * 0.25, 10))
                    continue
                raise ApiError(0, "TRANSPORT", str(getattr(err, "reason", err))) from None

    @staticmethod
    def _error(err: urllib.error.HTTPError) -> ApiError:
        retry = err.headers.get("Retry-After")
        request_id = err.headers.get("X-Request-Id")
        try:
            body = json.loads(err.read().decode("utf-8"))["error"]
            return ApiError(err.code, body.get("code", "ERROR"), body.get("message", ""), request_id, body.get("details"),
                            float(retry) if retry else None)
        except Exception:
            return ApiError(err.code, "HTTP_ERROR", err.reason or "", request_id, None, float(retry) if retry else None)

    def get(self, path: str, **params: Any) -> Dict[str, Any]:
        """One request; the whole envelope (`data`, `pagination`, `meta`)."""
        with self._open(path, params) as res:
            return json.loads(res.read().decode("utf-8"))

    def walk(self, path: str, **params: Any) -> Iterator[Dict[str, Any]]:
        """Every item of a list route, page after page, following `next_cursor`."""
        cursor = None
        while True:
            page = self.get(path, **params, cursor=cursor)
            yield from page["data"]
            cursor = page["pagination"]["next_cursor"]
            if not page["pagination"]["has_more"] or not cursor:
                return

    # --- resources ---------------------------------------------------------------------------

    def _base(self, coin: Optional[str]) -> str:
        return f"/v3/{coin}" if coin else f"/v3/{self.namespace}"

    def whoami(self) -> Dict[str, Any]:
        return self.get("/v3/whoami")["data"]

    def markets(self, coin: Items = None, window: Items = None, status: Items = None, start_time: Time = None,
                end_time: Time = None, order: Optional[str] = None, page_size: int = 1000,
                venue_coin: Optional[str] = None, min_coverage: Optional[float] = None,
                resolution_check: Items = None) -> Iterator[Dict[str, Any]]:
        """Markets newest first (or `order="asc"`). `venue_coin="sol"` reads another venue's per-coin routes.
        `min_coverage=0.99`: only ended, sealed windows whose books cover at least that share of the window.
        `resolution_check="disagrees"`: only windows whose venue winner disagrees with the recorded reference
        price's outcome (each record's `reference` says open, close and outcome)."""
        params = dict(window=_items(window), status=_items(status), start_time=_time(start_time),
                      end_time=_time(end_time), order=order, limit=page_size, min_coverage=min_coverage,
                      resolution_check=_items(resolution_check))
        if venue_coin:
            return self.walk(f"/v3/{venue_coin}/markets", **params)
        return self.walk(f"/v3/{self.namespace}/markets", coin=_items(coin), **params)

    def market(self, market_id: str, venue_coin: Optional[str] = None) -> Dict[str, Any]:
        path = f"/v3/{venue_coin}/markets/{market_id}" if venue_coin else f"/v3/{self.namespace}/{market_id}"
        return self.get(path)["data"]

    def latest(self, market_id: str, outcome: Union[int, str, None] = None) -> Optional[Dict[str, Any]]:
        """The newest recorded book, or None when nothing was captured."""
        return self.get(f"/v3/{self.namespace}/{market_id}/orderbook/latest", outcome=outcome)["data"]

    def _snapshots_path(self, market_id: str, venue_coin: Optional[str]) -> str:
        return f"/v3/{venue_coin}/markets/{market_id}/snapshots" if venue_coin else f"/v3/{self.namespace}/{market_id}/snapshots"

    def snapshots(self, market_id: str, start_time: Time = None, end_time: Time = None, interval: Optional[str] = None,
                  outcome: Union[int, str, None] = None, order: Optional[str] = None, page_size: int = 1000,
                  venue_coin: Optional[str] = None, include_orderbook: Optional[bool] = None) -> Iterator[Dict[str, Any]]:
        """Every recorded snapshot of the range (all of the market by default), in time order."""
        params = dict(start_time=_time(start_time), end_time=_time(end_time), interval=interval, outcome=outcome,
                      order=order, limit=page_size)
        if include_orderbook is not None:
            params["include_orderbook"] = "true" if include_orderbook else "false"
        return self.walk(self._snapshots_path(market_id, venue_coin), **params)

    def changes(self, market_id: str, start_time: Time = None, end_time: Time = None,
                outcome: Union[int, str, None] = None, page_size: int = 1000,
                venue_coin: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        """Recorded book changes in time order: a `snapshot` per outcome, then `delta`s (changed levels, size 0 removes)."""
        path = (f"/v3/{venue_coin}/markets/{market_id}/orderbook/changes" if venue_coin
                else f"/v3/{self.namespace}/{market_id}/orderbook/changes")
        return self.walk(path, start_time=_time(start_time), end_time=_time(end_time), outcome=outcome, limit=page_size)

    @staticmethod
    def rebuild(changes: Iterable[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
        """Applies changes in order, yielding each outcome's whole book after each (bids and asks best first)."""
        books: Dict[int, Dict[str, Dict[float, float]]] = {}
        for c in changes:
            if c["type"] == "snapshot":
                books[c["outcome_index"]] = {"bid": {}, "ask": {}}
            book = books[c["outcome_index"]]
            for side in ("bid", "ask"):
                for price, size in zip(c[f"{side}_prices"], c[f"{side}_sizes"]):
                    if size == 0:
                        book[side].pop(price, None)
                    else:
                        book[side][price] = size
            bids = sorted(book["bid"].items(), reverse=True)
            asks = sorted(book["ask"].items())
            yield {"timestamp": c["timestamp"], "outcome_index": c["outcome_index"],
                   "bid_prices": [p for p, _ in bids], "bid_sizes": [s for _, s in bids],
                   "ask_prices": [p for p, _ in asks], "ask_sizes": [s for _, s in asks]}

    def timeseries(self, market_id: str, metric: str = "chance", outcome: Union[int, str, None] = None,
                   start_time: Time = None, end_time: Time = None, interval: Optional[str] = None,
                   order: Optional[str] = None, page_size: int = 1000) -> Iterator[Dict[str, Any]]:
        return self.walk(f"/v3/{self.namespace}/{market_id}/timeseries", metric=metric, outcome=outcome,
                         start_time=_time(start_time), end_time=_time(end_time), interval=interval, order=order,
                         limit=page_size)

    def trades(self, market_id: str, start_time: Time = None, end_time: Time = None,
               outcome: Union[int, str, None] = None, order: Optional[str] = None, page_size: int = 1000,
               venue_coin: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        """Every recorded trade of the range in time order. `source` says what the venue sent: `stream`
        (a trade event: price, size, side, fee, transaction hash) or `rest_last_trade` (only a
        last-trade price REST showed changed: no size, side or hash, and no fill record)."""
        path = f"/v3/{venue_coin}/markets/{market_id}/trades" if venue_coin else f"/v3/{self.namespace}/{market_id}/trades"
        return self.walk(path, start_time=_time(start_time), end_time=_time(end_time), outcome=outcome, order=order,
                         limit=page_size)

    def reference(self, coin: str, source: str = "chainlink", start_time: Time = None, end_time: Time = None,
                  order: Optional[str] = None, page_size: int = 1000) -> Iterator[Dict[str, Any]]:
        """A coin's reference prices as Polymarket's price socket relayed them, each observation once in time
        order: `source="chainlink"` (the markets' resolution source, `btc/usd`) or `"binance"` (`btcusdt`).
        `ts` is the observation's own time. Without a range, the hour before `end_time` (default now). Spans in
        which observations may be missing are in `reference_gaps`."""
        return self.walk(f"/v3/reference/{coin}", source=source, start_time=_time(start_time), end_time=_time(end_time),
                         order=order, limit=page_size)

    def reference_gaps(self, coin: str, source: str = "chainlink", start_time: Time = None,
                       end_time: Time = None) -> List[Dict[str, Any]]:
        """Gaps of a coin's reference feed over the range: observations in them may be missing."""
        page = self.get(f"/v3/reference/{coin}", source=source, start_time=_time(start_time), end_time=_time(end_time), limit=1)
        return page["meta"].get("gaps", [])

    def certificate(self, market_id: str, venue_coin: Optional[str] = None) -> Dict[str, Any]:
        """How complete the record of a market window is: coverage share, missing seconds by cause
        (venue, capture, unproved, unrecorded) and by gap reason, books and trades recorded, clock offset."""
        path = f"/v3/{venue_coin}/markets/{market_id}/certificate" if venue_coin else f"/v3/{self.namespace}/{market_id}/certificate"
        return self.get(path)["data"]

    def gaps(self, market_id: str, dataset: str = "books", start_time: Time = None, end_time: Time = None) -> List[Dict[str, Any]]:
        """Capture gaps of a market's range: spans nothing was recorded for (from a snapshot page's meta)."""
        page = self.get(f"/v3/{self.namespace}/{market_id}/{'timeseries' if dataset == 'metrics' else 'snapshots'}",
                        start_time=_time(start_time), end_time=_time(end_time), limit=1,
                        **({"metric": "chance"} if dataset == "metrics" else {}))
        return page["meta"].get("gaps", [])

    def coverage(self) -> Dict[str, Any]:
        return self.get(f"/v3/{self.namespace}/coverage")["data"]

    # --- files ---------------------------------------------------------------------------------

    def export(self, market_id: str, dest: str, kind: str = "snapshots", format: str = "parquet",
               start_time: Time = None, end_time: Time = None, **params: Any) -> str:
        """The whole range as one CSV or Parquet file at `dest` (written whole, then renamed)."""
        if format not in ("csv", "parquet"):
            raise ValueError("format is csv or parquet")
        path = f"/v3/{self.namespace}/{market_id}/{kind}.{format}"
        with self._open(path, dict(start_time=_time(start_time), end_time=_time(end_time), **params)) as res:
            _write_atomically(res, dest)
        return dest

    def files(self, dataset: Optional[str] = None, coin: Items = None, window: Items = None, start_time: Time = None,
              end_time: Time = None, venue_coin: Optional[str] = None, page_size: int = 1000) -> Iterator[Dict[str, Any]]:
        params = dict(dataset=dataset, window=_items(window), start_time=_time(start_time), end_time=_time(end_time), limit=page_size)
        if not venue_coin:
            params["coin"] = _items(coin)
        return self.walk(f"{self._base(venue_coin)}/files", **params)

    def mirror(self, dest: str, **filters: Any) -> Dict[str, Any]:
        """Lake files into `dest` in the lake's own layout: files already there with the listed
        sha256 are skipped; others are downloaded, verified and renamed into place."""
        report: Dict[str, Any] = {"listed": 0, "skipped": 0, "downloaded": 0, "bytes": 0}
        for f in self.files(**filters):
            report["listed"] += 1
            rel = urllib.parse.unquote(f["url"].split("/files/", 1)[1])
            target = os.path.join(dest, *rel.split("/"))
            if os.path.exists(target) and _sha256(target) == f["sha256"]:
                report["skipped"] += 1
                continue
            with self._open(urllib.parse.urlparse(f["url"]).path) as res:
                digest = _write_atomically(res, target, expect_sha256=f["sha256"])
            report["downloaded"] += 1
            report["bytes"] += f["bytes"]
            assert digest == f["sha256"]
        return report


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_atomically(res, dest: str, expect_sha256: Optional[str] = None) -> str:
    directory = os.path.dirname(os.path.abspath(dest))
    os.makedirs(directory, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=".part-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in iter(lambda: res.read(1 << 20), b""):
                out.write(chunk)
                h.update(chunk)
        digest = h.hexdigest()
        if expect_sha256 and digest != expect_sha256:
            raise ApiError(0, "CHECKSUM_MISMATCH", f"{dest}: sha256 {digest} is not the listed {expect_sha256}")
        os.replace(tmp, dest)
        return digest
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def to_dataframe(items: Iterable[Dict[str, Any]], kind: str = "snapshots"):
    """A pandas DataFrame (pandas must be installed): snapshots as one row per book, timeseries
    and markets as one row per item. Times become timezone-aware UTC timestamps."""
    try:
        import pandas as pd  # type: ignore
    except ImportError as err:  # pragma: no cover - depends on the machine
        raise ImportError("to_dataframe needs pandas: pip install pandas") from err
    rows: List[Dict[str, Any]] = []
    if kind == "snapshots":
        for s in items:
            for b in s["books"]:
                rows.append({"timestamp": s["timestamp"], **b})
    else:
        rows = list(items)
    frame = pd.DataFrame(rows)
    for column in ("timestamp", "exchange_time", "recv_time", "start_time", "end_time", "created_time", "resolved_time"):
        if column in frame:
            frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame
