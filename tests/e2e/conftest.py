"""The e2e tests' shared fixture: the study on tiny data and tiny models in a temporary folder."""

from tests.e2e.test_study_e2e import tiny_study  # noqa: F401  (defined beside the test that runs every stage)
