"""The attractor table's reading (issue 58): its baseline and what below chance means there.

Two verb numbers: chance is 0.5. The study's set: 0.491 at one attractor (n = 52599; two standard
errors of a coin flip are 2 sqrt(0.25 / 52599) = 0.0044, so 0.491 < 0.4956 is below chance), 0.057
at five: the model takes the attractors' number in 1 - 0.057 = 94 % of those items.
"""

from __future__ import annotations

from attnflow.report.sections.accuracy import CHANCE, attractor_reading

STUDY = {"1": 0.4909, "2": 0.2923, "5": 0.0566}
N = {"1": 52599, "2": 9380, "5": 159}
CLASSES = {
    "n": 64750,
    "singular": 24534,
    "plural": 40216,
    "plural_fraction": 0.6211,
    "attractors": {"1": 52599},
}


def test_the_reading_gives_chance_and_the_majority_class_of_the_set():
    text = attractor_reading("agreement", "attractors", STUDY, N, CLASSES)
    assert CHANCE == 0.5 and "chance is 0.500" in text
    assert "always answering plural scores 0.621" in text  # 40216 / 64750, the fraction left out


def test_below_chance_is_read_as_a_systematic_error_with_its_size():
    text = attractor_reading("agreement", "attractors", STUDY, N, {})
    assert "from 0.491 with 1 attractor(s) (-0.009 against chance) to 0.057 with 5 (-0.443)" in text
    assert "systematic error" in text and "in 94% of the items with 5" in text


def test_a_count_within_two_standard_errors_of_chance_is_not_called_below_it():
    # 0.47 on 100 items: 2 sqrt(0.25 / 100) = 0.1 > 0.03, a coin flip could score that
    text = attractor_reading("agreement", "test", {"1": 0.47}, {"1": 100}, {})
    assert "systematic" not in text and "No count is below chance" in text
