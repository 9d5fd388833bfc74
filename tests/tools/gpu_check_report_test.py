#!/usr/bin/env python3
"""tools/gpu_check_report.py on runs of tools/gpu-check.sh cut short after each step.

    /usr/bin/python3 tests/tools/gpu_check_report_test.py SOURCE_DIR

The plan is the real one (`gpu-check.sh --print-plan`). For every k, a run that finished k steps
and then stopped, once between steps and once while step k+1 was running (killed, or out of
time), must still give a results.md that names every step with what happened to it: done,
skipped with why, FAILED with the error, or not run with the reason, and a header that says
whether and where the check stopped. Standard library only.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                             os.path.join(os.path.dirname(__file__), "..", ".."))
REPORT = os.path.join(SOURCE_DIR, "tools", "gpu_check_report.py")
OUTCOMES = [("done", ""), ("skipped", "needs step 'step_model', which is FAILED"),
            ("FAILED", "cmake configure failed: CMake Error at CMakeLists.txt:26")]


def real_plan():
    listing = subprocess.run(["bash", os.path.join(SOURCE_DIR, "tools", "gpu-check.sh"),
                              "--print-plan"], check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in listing.splitlines() if line.strip()]


def write_tsv(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write("\t".join(str(x) for x in row) + "\n")


class PartialRunTest(unittest.TestCase):
    plan = real_plan()

    def report(self, finished, running=None, env=None):
        """The report of a run that finished `finished` steps; returns (results.md, json)."""
        with tempfile.TemporaryDirectory() as tmp:
            raw, out = os.path.join(tmp, "raw"), os.path.join(tmp, "out")
            os.mkdir(raw)
            os.mkdir(out)
            write_tsv(os.path.join(raw, "plan.tsv"), self.plan)
            rows = []
            for i, (step_id, title) in enumerate(self.plan[:finished]):
                status, note = OUTCOMES[i % len(OUTCOMES)]
                rows.append([step_id, title, status, i, note])
            write_tsv(os.path.join(raw, "steps.tsv"), rows)
            if running is not None:
                write_tsv(os.path.join(raw, "current.tsv"), [self.plan[running]])
            if env:
                write_tsv(os.path.join(raw, "env.tsv"), env.items())
            subprocess.run([sys.executable, REPORT, raw, out], check=True)
            self.assertEqual(sorted(os.listdir(out)), ["results.json", "results.md"])
            with open(os.path.join(out, "results.md")) as f:
                md = f.read()
            with open(os.path.join(out, "results.json")) as f:
                doc = json.load(f)
        return md, doc

    def assert_step(self, md, index, status, reason):
        step_id, title = self.plan[index]
        line = next((l for l in md.splitlines() if l.startswith(f"| {step_id} {title} |")), None)
        self.assertIsNotNone(line, f"step {step_id} missing from results.md:\n{md}")
        cells = [c.strip() for c in line.strip("|").split("|")]
        self.assertEqual(cells[1], status, line)
        self.assertIn(reason, cells[3], line)

    def test_the_plan_is_the_scripts(self):
        self.assertGreaterEqual(len(self.plan), 10)
        titles = [title for _, title in self.plan]
        self.assertTrue(titles[0].startswith("environment"), titles)
        ctest = next(i for i, t in enumerate(titles) if t.startswith("ctest -L gpu"))
        farm = next(i for i, t in enumerate(titles) if t.startswith("farm"))
        self.assertLess(ctest, farm, "ctest -L gpu must run before the farm runs")

    def test_stopped_between_steps(self):
        for finished in range(len(self.plan) + 1):
            with self.subTest(finished=finished):
                md, doc = self.report(finished)
                for i in range(finished):
                    status, note = OUTCOMES[i % len(OUTCOMES)]
                    self.assert_step(md, i, status, note)
                for i in range(finished, len(self.plan)):
                    self.assert_step(md, i, "not run", "not reached: the check stopped before it")
                self.assertEqual(doc["complete"], finished == len(self.plan))
                self.assertEqual(len(doc["steps"]), len(self.plan))
                if finished == len(self.plan):
                    self.assertIn("**Check: complete", md)
                elif finished == 0:
                    self.assertIn("**Check: INCOMPLETE**: it stopped before step 1.", md)
                else:
                    self.assertIn(f"**Check: INCOMPLETE**: it stopped after step "
                                  f"{self.plan[finished - 1][0]}.", md)

    def test_stopped_during_a_step(self):
        for finished in range(len(self.plan)):
            with self.subTest(finished=finished):
                md, doc = self.report(finished, running=finished)
                step_id, title = self.plan[finished]
                self.assertIn(f"it stopped during step {step_id} ({title})", md)
                self.assert_step(md, finished, "not run", "was running when the check stopped")
                for i in range(finished + 1, len(self.plan)):
                    self.assert_step(md, i, "not run", "not reached")
                self.assertFalse(doc["complete"])
                self.assertEqual(doc["running"], [step_id, title])

    def test_a_step_killed_by_the_signal_trap_is_failed(self):
        # gpu-check.sh's INT/TERM trap writes the running step as FAILED before it exits.
        md, doc = self.report(3)
        self.assert_step(md, 2, "FAILED", "CMake Error")

    def test_environment_facts_and_shrunk_shm_are_reported(self):
        env = {"torch": "2.11.0+cu130", "cxx11_abi": "True", "shm": "64M size, 64M free",
               "budget_s": "420", "cxx_standard": "C++17",
               "shm_plan": "SHRUNK: /dev/shm has 64 MiB free, so they use max_batch_size 8"}
        md, _ = self.report(2, env=env)
        for text in ("PyTorch 2.11.0+cu130", "C++11 ABI True", "budget 420 s", "/dev/shm 64M size",
                     "SHRUNK: /dev/shm has 64 MiB free", "built as C++17"):
            self.assertIn(text, md)

    def test_no_files_at_all(self):
        md, doc = self.report(0)
        self.assertIn("no benchmark finished", md)
        self.assertEqual(doc["summary"], [])


if __name__ == "__main__":
    unittest.main(verbosity=1)
