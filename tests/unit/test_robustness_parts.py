"""`tsvk robustness --parts`: the parts named run, in the order a full run measures them; a part that does not exist,
or that the engine does not have, is refused naming the allowed ones; a run of some parts keeps its own results name,
so a full run's stay the latest; the slow-clients part is judged without TorchServe's known weaknesses failing it."""

from __future__ import annotations

import pytest

from tsvk_tools.errors import UsageError
from tsvk_tools.lab.robustness import checks, slow_clients
from tsvk_tools.lab.robustness.checks import failed, held
from tsvk_tools.lab.robustness.robustness_cli import PARTS, _results_name, parse_parts, parts_of


def test_without_parts_a_run_has_every_part_of_its_engine():
    assert parse_parts(None, "torchserve") == PARTS
    assert "key expiry" not in parse_parts(None, "kserve") and "slow clients" in parse_parts(None, "kserve")


def test_the_parts_named_run_in_the_order_of_a_full_run():
    assert parse_parts(" drain, slow clients ,fuzz", "kserve") == ("fuzz", "slow clients", "drain")


@pytest.mark.parametrize("text,says", [
    ("slow client", "unknown part 'slow client'"),
    ("fuzz,nope", "unknown part 'nope'"),
    (" , ", "no part named"),
])
def test_an_unknown_part_is_refused_with_the_allowed_ones(text, says):
    with pytest.raises(UsageError, match=says) as err:
        parse_parts(text, "torchserve")
    assert "the parts are: fuzz, bombs," in str(err.value) and "slow clients, drain" in str(err.value)


def test_a_part_the_engine_does_not_have_is_refused_saying_why():
    with pytest.raises(UsageError, match="'key expiry' is no part with --engine kserve \\(its keys do not expire\\)"):
        parse_parts("key expiry", "kserve")


def test_a_run_of_some_parts_keeps_its_own_results_name():
    assert _results_name("torchserve", PARTS) == "robustness" and _results_name("kserve", parts_of("kserve")) == "robustness-kserve"
    assert _results_name("kserve", ("slow clients",)) == "robustness-kserve-slow-clients"
    assert _results_name("torchserve", ("fuzz", "drain")) == "robustness-fuzz-drain"


def test_torchserve_s_known_weaknesses_are_reported_not_failed():
    verdicts = {slow_clients.CLOSED: failed("none closed"), slow_clients.GOOD_ANSWERED: failed("3 failed"),
                slow_clients.BEYOND: held("503s")}
    result = checks.judged_with_weaknesses(verdicts, slow_clients.KNOWN_WEAKNESSES["torchserve"])
    assert set(result["checks"]) == {slow_clients.GOOD_ANSWERED, slow_clients.BEYOND}  # one it does not show is judged
    assert set(result["weaknesses"]) == {slow_clients.CLOSED} and "none closed" in result["weaknesses"][slow_clients.CLOSED]
    assert slow_clients.KNOWN_WEAKNESSES.get("kserve") is None
