#!/usr/bin/env python3
"""Checks the fault suite's own verdicts (tests/faults/run) without servers: a skipped scenario, or a
skipped part of one, fails the run unless allowed by name; a scenario over its time limit fails in
time; the table says SKIP. Run by scripts/test.sh before the quick fault run."""

import argparse
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
loader = importlib.machinery.SourceFileLoader("faults_run", os.path.join(HERE, "run"))
spec = importlib.util.spec_from_loader("faults_run", loader)
faults = importlib.util.module_from_spec(spec)
loader.exec_module(faults)

problems = []


def expect(what, cond):
    print("%s  %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        problems.append(what)


class FakeScenario:
    """Stands in for a scenario: what it does is set per check."""
    behaviour = None

    def __init__(self, suite, n):
        self.s, self.n = suite, n

    def run(self):
        return FakeScenario.behaviour(self)


def passing(sc):
    return {"fault": sc.n, "name": faults.FAULT_NAMES[sc.n], "passed": True, "problems": [], "notes": [],
            "total": {}, "injected": {}, "metrics": {}}


def suite(allow=None, timeout=None):
    args = argparse.Namespace(quick=True, only=None, seed=1, build_dir=tempfile.gettempdir(), keep=False,
                              no_netns=True, allow_skip=allow, scenario_timeout=timeout, fuzz_seconds=0)
    return faults.Suite(args)


faults.Scenario = FakeScenario

FakeScenario.behaviour = lambda sc: sc.s.skip(6, "no namespace")
r = suite().run_scenario(6)
expect("a skipped scenario is not a pass", r["passed"] is False and r.get("skipped") == "no namespace")
expect("its table row says SKIP and FAIL", "SKIP (not allowed: FAIL)" in faults.render_table(
    {"seed": 1, "quick": True, "seconds": 0, "netns": False, "results": [r]}))
r = suite(allow="fault-6").run_scenario(6)
expect("a skip allowed by name passes", r["passed"] is True and r.get("skipped") == "no namespace")
r = suite(allow="fault-5").run_scenario(6)
expect("allowing another name does not allow it", r["passed"] is False)


def partial(sc):
    sc.s.skip(6, "no netem", name="fault-6-netem")
    return passing(sc)


FakeScenario.behaviour = partial
r = suite().run_scenario(6)
expect("a skipped part of a scenario fails it", r["passed"] is False and "fault-6-netem" in r["problems"][0])
r = suite(allow="fault-6-netem").run_scenario(6)
expect("a skipped part allowed by name passes, still reported", r["passed"] is True and
       "SKIP fault-6-netem (allowed)" in faults.render_table(
           {"seed": 1, "quick": True, "seconds": 0, "netns": False, "results": [r]}))

FakeScenario.behaviour = passing
expect("a scenario that passes passes", suite().run_scenario(1)["passed"] is True)


def hangs(sc):
    time.sleep(60)


FakeScenario.behaviour = hangs
t0 = time.time()
r = suite(timeout=2).run_scenario(1)
expect("a hung scenario fails at its time limit", r["passed"] is False and "timed out" in r["problems"][0]
       and time.time() - t0 < 10)


def raises(sc):
    raise RuntimeError("cannot run")


FakeScenario.behaviour = raises
expect("a scenario that cannot run fails", suite().run_scenario(2)["passed"] is False)

if problems:
    print("selftest: %d problem(s)" % len(problems))
    sys.exit(1)
print("selftest: the fault suite's verdicts hold")
