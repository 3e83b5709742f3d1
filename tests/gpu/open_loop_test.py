"""Unit tests of open_loop.py (the open-loop pair's bookkeeping), which run
without a GPU or PyTorch: python3 tests/gpu/open_loop_test.py"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import open_loop  # noqa: E402

MS = 0.001


class OpenLoopTest(unittest.TestCase):
    def test_requests_arrive_every_period_from_the_start_until_the_end(self):
        got = list(open_loop.arrivals(10.0, 0.5, 2.0))
        self.assertEqual(got, [10.0, 10.5, 11.0, 11.5])
        self.assertEqual(open_loop.offered(0.5, 2.0), 4)
        self.assertEqual(open_loop.offered(0.5, 2.01), 5)  # One arrives just before the end.

    def test_a_30_percent_demand_of_2_ms_requests_is_one_every_6_67_ms(self):
        self.assertEqual(open_loop.offered(2 * MS / 0.3, 8.0), 1200)

    def test_a_late_request_does_not_move_the_arrivals_after_it(self):
        # Request 0 takes 25 ms: requests 1 and 2 arrive while it runs.
        records = [(0, 0, 25 * MS), (10 * MS, 25 * MS, 27 * MS), (20 * MS, 27 * MS, 29 * MS),
                   (30 * MS, 30 * MS, 32 * MS)]
        s = open_loop.summary(records, 10 * MS, 40 * MS)
        self.assertEqual(s["late"], 2)
        self.assertAlmostEqual(s["max_late_ms"], 15.0)
        self.assertEqual(s["offered"], 4)
        self.assertEqual(s["served"], 4)

    def test_latency_runs_from_the_scheduled_arrival_to_completion(self):
        records = [(0, 0, 2 * MS), (10 * MS, 10 * MS, 12 * MS), (20 * MS, 20 * MS, 31 * MS),
                   (30 * MS, 31 * MS, 33 * MS)]
        s = open_loop.summary(records, 10 * MS, 40 * MS)
        self.assertAlmostEqual(s["p50_ms"], 2.0)
        self.assertAlmostEqual(s["p99_ms"], 11.0)
        self.assertEqual(s["late"], 1)

    def test_requests_not_served_by_the_end_lower_the_delivered_fraction(self):
        records = [(i * 10 * MS, i * 10 * MS, i * 10 * MS + 2 * MS) for i in range(7)]
        s = open_loop.summary(records, 10 * MS, 100 * MS)
        self.assertEqual((s["offered"], s["served"]), (10, 7))
        self.assertAlmostEqual(s["delivered_fraction"], 0.7)

    def test_nothing_served_gives_no_latency_rather_than_an_invented_one(self):
        s = open_loop.summary([], 10 * MS, 100 * MS)
        self.assertEqual(s["served"], 0)
        self.assertEqual(s["delivered_fraction"], 0.0)
        self.assertIsNone(s["p50_ms"])
        self.assertIsNone(s["p99_ms"])

    def test_a_period_that_is_not_positive_is_refused(self):
        with self.assertRaises(ValueError):
            list(open_loop.arrivals(0, 0, 1))


if __name__ == "__main__":
    unittest.main()
