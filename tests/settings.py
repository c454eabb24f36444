"""Settings of a test server that also serves ``tests.urls`` (a page that fails on purpose):
the test settings otherwise."""

from kueueweb.settings_testing import *  # noqa: F403

ROOT_URLCONF = "tests.urls"
