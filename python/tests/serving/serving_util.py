"""Shared by the serving-stack tests. Each test starts two client processes of a serving stack
(a minute or more on 2 cores, most of it their imports), so the suite-wide watchdog of
python/tests/conftest.py is re-armed per test with a longer deadline, and restored after: a test
module imports `serving_test_deadline` (an autouse fixture) to get it."""

import faulthandler

import pytest

from conftest import SUITE_DEADLINE_S  # python/tests/conftest.py

#: A serving test's own bound (its drivers' reads are bounded well below it).
TEST_DEADLINE_S = 900


@pytest.fixture(autouse=True)
def serving_test_deadline():
    faulthandler.dump_traceback_later(TEST_DEADLINE_S, exit=True)
    yield
    faulthandler.dump_traceback_later(SUITE_DEADLINE_S, exit=True)
