"""The tie rule between two measurements: faster only by more than the noise."""
from autotune.core.timing import Timing


def t(median, p20, p80):
    return Timing(median_ms=median, p20_ms=p20, p80_ms=p80, reps=100)


def test_a_difference_within_the_noise_is_a_tie_either_way():
    a, b = t(1.00, 0.98, 1.02), t(1.01, 0.99, 1.03)
    assert not a.faster_than(b) and not b.faster_than(a)


def test_a_difference_beyond_half_the_larger_range_is_faster():
    a, b = t(1.00, 0.98, 1.02), t(1.05, 1.03, 1.07)
    assert a.faster_than(b) and not b.faster_than(a)


def test_a_steady_measurement_whose_range_lies_below_a_noisy_ones_is_faster():
    """The 127x3000x511 sweep's case: half the noisy range (0.016 ms) exceeds the 0.0145 ms between medians."""
    steady, noisy = t(0.022016, 0.021792, 0.02224), t(0.036512, 0.030272, 0.062451)
    assert steady.faster_than(noisy) and not noisy.faster_than(steady)


def test_overlapping_ranges_with_close_medians_stay_a_tie():
    steady, noisy = t(0.0300, 0.0298, 0.0302), t(0.0310, 0.0290, 0.0600)
    assert not steady.faster_than(noisy) and not noisy.faster_than(steady)
