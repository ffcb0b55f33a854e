"""A closed-loop user draws one value at a time (`make_draw`): each draw, and what it leaves of the generator,
must be what the array form (`make_sampler(..)(rng, 1)[0]`) gives, or a run's results would change with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings, strategies as st

from simlab.scenario import Constant, Empirical, Exponential, Lognormal, Uniform
from simlab.world.distributions import make_draw, make_sampler

EMPIRICAL = Path(__file__).resolve().parent.parent / "scenarios" / "traces" / "arxiv-summarization-lengths.csv"

positive = st.floats(0.01, 1e5, allow_nan=False)
dists = st.one_of(
    st.builds(lambda v: Constant(dist="constant", value=v), st.floats(0, 1e5)),
    st.builds(lambda m: Exponential(dist="exponential", mean=m), positive),
    st.builds(lambda m, k: Lognormal(dist="lognormal", median=m, p95=m * k), positive, st.floats(1.01, 50)),
    st.builds(lambda a, w: Uniform(dist="uniform", low=a, high=a + w), st.floats(0, 1e4), st.floats(0, 1e4)),
    st.builds(lambda s: Empirical(dist="empirical", file=str(EMPIRICAL), column="num_prefill_tokens", scale=s),
              st.floats(0.01, 10)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(dists, min_size=1, max_size=4), st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_one_draw_is_the_array_forms_first_value_and_uses_the_generator_alike(kinds, seed, rounds):
    draws = [make_draw(d, Path) for d in kinds]
    samplers = [make_sampler(d, Path) for d in kinds]
    one, array = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(rounds):  # interleaved, as a user's think time, service and token counts are
        for draw, sample in zip(draws, samplers):
            value = draw(one)
            assert type(value) is float
            assert value == float(sample(array, 1)[0])
    assert one.bit_generator.state == array.bit_generator.state
