"""The Python client against a real server (started by test/clients.test.ts, which passes
PMH_API_URL, PMH_API_KEY and PMH_MARKET_ID). Standard library only, as the client."""

import csv
import datetime as dt
import io
import json
import os
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pmhistory import ApiError, Client, to_dataframe  # noqa: E402

URL = os.environ["PMH_API_URL"]
KEY = os.environ["PMH_API_KEY"]
MARKET = os.environ["PMH_MARKET_ID"]


def raw(path):
    """The same request without the client, to compare against."""
    req = urllib.request.Request(URL + path, headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req) as res:
        return json.loads(res.read())


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.api = Client(URL, KEY)

    def test_key_stays_out_of_repr(self):
        self.assertNotIn(KEY, repr(self.api))

    def test_markets_walk_cursors_over_two_coins(self):
        walked = list(self.api.markets(coin=["btc", "eth"], window="15m", page_size=3))
        whole = raw("/v3/wallet-prediction/markets?coin=btc,eth&window=15m&limit=1000")["data"]
        self.assertGreater(len(walked), 3, "more than one page")
        self.assertEqual([m["market_id"] for m in walked], [m["market_id"] for m in whole])
        self.assertEqual({m["coin"] for m in walked}, {"btc", "eth"})

    def test_markets_by_coverage(self):
        whole = raw("/v3/wallet-prediction/markets?limit=1000")["data"]
        sealed = [m for m in whole if m["coverage"] is not None]
        self.assertGreater(len(sealed), 0, "some windows ended and were sealed")
        threshold = sorted(m["coverage"]["share"] for m in sealed)[len(sealed) // 2]
        walked = list(self.api.markets(min_coverage=threshold, page_size=3))
        self.assertEqual([m["market_id"] for m in walked],
                         [m["market_id"] for m in sealed if m["coverage"]["share"] >= threshold])

    def test_market_and_latest(self):
        self.assertEqual(self.api.market(MARKET)["market_id"], MARKET)
        latest = self.api.latest(MARKET)
        self.assertEqual(latest["market_id"], MARKET)
        self.assertEqual(len(latest["books"]), 2)
        one = self.api.latest(MARKET, outcome=1)
        self.assertEqual([b["outcome_index"] for b in one["books"]], [1])

    def test_snapshots_walk_equals_one_big_page(self):
        walked = list(self.api.snapshots(MARKET, page_size=7))
        whole = raw(f"/v3/wallet-prediction/{MARKET}/snapshots?limit=1000")["data"]
        self.assertGreater(len(walked), 7)
        self.assertEqual(walked, whole)

    def test_changes_rebuild_the_snapshots(self):
        changes = list(self.api.changes(MARKET, page_size=9))
        self.assertEqual(changes, raw(f"/v3/wallet-prediction/{MARKET}/orderbook/changes?limit=1000")["data"])
        self.assertEqual({c["type"] for c in changes[:2]}, {"snapshot"})
        rebuilt = {(b["timestamp"], b["outcome_index"]): b for b in self.api.rebuild(changes)}
        for snapshot in raw(f"/v3/wallet-prediction/{MARKET}/snapshots?limit=1000")["data"]:
            for book in snapshot["books"]:
                got = rebuilt.get((snapshot["timestamp"], book["outcome_index"]))
                if got is None:
                    continue  # unchanged since the outcome's previous book: no change recorded
                for field in ("bid_prices", "bid_sizes", "ask_prices", "ask_sizes"):
                    self.assertEqual(got[field], book[field])
        self.assertGreater(len(rebuilt), 0)

    def test_time_arguments(self):
        first = raw(f"/v3/wallet-prediction/{MARKET}/snapshots?limit=3")["data"]
        start = dt.datetime.fromisoformat(first[1]["timestamp"].replace("Z", "+00:00"))
        walked = list(self.api.snapshots(MARKET, start_time=start, page_size=2))
        self.assertEqual(walked[0]["timestamp"], first[1]["timestamp"], "an aware datetime is the instant it names")
        millis = int(start.timestamp() * 1000)
        self.assertEqual(next(iter(self.api.snapshots(MARKET, start_time=millis)))["timestamp"], first[1]["timestamp"])

    def test_timeseries_walk(self):
        walked = list(self.api.timeseries(MARKET, metric="chance", page_size=5))
        whole = raw(f"/v3/wallet-prediction/{MARKET}/timeseries?metric=chance&limit=1000")["data"]
        self.assertEqual(walked, whole)
        self.assertTrue(all(0 <= s["value"] <= 1 for s in walked))

    def test_trades_walk(self):
        walked = list(self.api.trades(MARKET, page_size=3))
        whole = raw(f"/v3/wallet-prediction/{MARKET}/trades?limit=1000")["data"]
        self.assertGreater(len(walked), 0)
        self.assertEqual(walked, whole)
        # The wallet venue sends no trade events: what REST showed, labelled, never passed off as fills.
        self.assertTrue(all(t["source"] == "rest_last_trade" and t["size"] is None for t in walked))

    def test_reference_walk_and_records(self):
        market = self.api.market(MARKET)
        start, end = market["start_time"], market["end_time"]
        walked = list(self.api.reference("btc", start_time=start, end_time=end, page_size=50))
        whole = raw(f"/v3/reference/btc?start_time={start}&end_time={end}&limit=1000")["data"]
        self.assertGreater(len(walked), 50)
        self.assertEqual(walked, whole)
        self.assertEqual({o["symbol"] for o in walked}, {"btc/usd"})
        self.assertEqual(self.api.reference_gaps("btc", start_time=start, end_time=end), [])
        self.assertEqual(set(market["reference"]), {"source", "symbol", "open", "close", "outcome_by_reference",
                                                    "agrees_with_resolution"})
        checked = list(self.api.markets(resolution_check="agrees,disagrees", page_size=100))
        self.assertGreater(len(checked), 0)
        self.assertTrue(all(m["reference"]["agrees_with_resolution"] is not None for m in checked))

    def test_certificate(self):
        cert = self.api.certificate(MARKET)
        self.assertEqual(cert["market_id"], MARKET)
        self.assertTrue(0 <= cert["coverage"]["share"] <= 1)
        # Books in the window: the snapshots route also has those recorded up to a minute past the end.
        snapshots = raw(f"/v3/wallet-prediction/{MARKET}/snapshots?limit=1000")["data"]
        self.assertGreater(cert["books"]["recorded"], 0)
        self.assertLessEqual(cert["books"]["recorded"], sum(len(s["books"]) for s in snapshots))

    def test_exports_to_files(self):
        with tempfile.TemporaryDirectory() as d:
            pq = self.api.export(MARKET, os.path.join(d, "books.parquet"))
            with open(pq, "rb") as fh:
                data = fh.read()
            self.assertEqual(data[:4], b"PAR1")
            self.assertEqual(data[-4:], b"PAR1")
            path = self.api.export(MARKET, os.path.join(d, "chance.csv"), kind="timeseries", format="csv", metric="chance")
            with open(path) as fh:
                rows = list(csv.DictReader(fh))
            self.assertEqual(len(rows), len(list(self.api.timeseries(MARKET, metric="chance"))))
            self.assertTrue(rows[0]["timestamp"].endswith("Z"))
            self.assertEqual([n for n in os.listdir(d) if n.startswith(".part-")], [], "no partial file left")

    def test_mirror_verifies_and_skips(self):
        with tempfile.TemporaryDirectory() as d:
            first = self.api.mirror(d, dataset="books", coin="btc")
            self.assertGreater(first["downloaded"], 0)
            self.assertEqual(first["skipped"], 0)
            again = self.api.mirror(d, dataset="books", coin="btc")
            self.assertEqual((again["downloaded"], again["skipped"]), (0, first["listed"]), "a second run only checks")
            victim = next(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f.endswith(".parquet"))
            with open(victim, "r+b") as fh:
                fh.seek(10)
                fh.write(b"corrupted")
            healed = self.api.mirror(d, dataset="books", coin="btc")
            self.assertEqual(healed["downloaded"], 1, "a damaged file is fetched again")
            self.assertIn(os.sep.join(["books", "venue=wallet-prediction", "coin=btc"]), victim, "the lake's own layout")

    def test_errors_carry_code_and_request_id(self):
        with self.assertRaises(ApiError) as caught:
            self.api.market("no-such-market-1")
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "MARKET_NOT_FOUND"))
        self.assertTrue(caught.exception.request_id)
        with self.assertRaises(ApiError) as bad:
            Client(URL, "pmh_" + "x" * 32, max_retries=0).whoami()
        self.assertEqual(bad.exception.code, "AUTH_INVALID")
        self.assertNotIn(KEY, str(bad.exception))

    def test_gaps_and_coverage(self):
        self.assertIsInstance(self.api.gaps(MARKET), list)
        self.assertIn("recorded", self.api.coverage())

    def test_dataframes_when_pandas_is_installed(self):
        try:
            import pandas  # noqa: F401
        except ImportError:
            self.skipTest("pandas is not installed here")
        frame = to_dataframe(self.api.snapshots(MARKET))
        self.assertEqual(str(frame["timestamp"].dt.tz), "UTC")


if __name__ == "__main__":
    unittest.main()
