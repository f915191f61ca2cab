"""The documented client procedure for token auth: resend with the key on file when TorchServe refuses."""

from __future__ import annotations

import json

from tsvk_tools.keys import KEY_FILE, call_with_fresh_key, is_key_refusal, renewal_period_s

REFUSAL = json.dumps({"code": 400, "type": "InvalidKeyException", "message": "Token Authorization failed."}).encode()
OUR_400 = json.dumps({"code": 400, "type": "InvalidInput", "error": "bad_image", "source": "tsvk", "message": "x"}).encode()


def _keys(tmp_path, inference: str) -> None:
    (tmp_path / KEY_FILE).write_text(json.dumps({"inference": {"key": inference}, "management": {"key": "m"}, "API": {"key": "a"}}))


def test_a_refused_key_is_read_again_and_the_request_resent(tmp_path, monkeypatch):
    monkeypatch.setattr("tsvk_tools.keys.RETRY_PAUSE_S", 0.0)
    _keys(tmp_path, "old")
    seen = []

    def send(auth):
        seen.append(auth.get("Authorization"))
        if len(seen) == 1:
            _keys(tmp_path, "new")  # the renewer replaced the key meanwhile
            return 400, REFUSAL
        return 200, b"{}"

    assert call_with_fresh_key(send, tmp_path) == (200, b"{}")
    assert seen == ["Bearer old", "Bearer new"]


def test_our_own_400_is_not_mistaken_for_a_key_refusal(tmp_path):
    _keys(tmp_path, "k")
    calls = []
    assert call_with_fresh_key(lambda auth: calls.append(auth) or (400, OUR_400), tmp_path) == (400, OUR_400)
    assert len(calls) == 1
    assert is_key_refusal(400, REFUSAL) and not is_key_refusal(400, OUR_400) and not is_key_refusal(200, REFUSAL)


def test_keys_are_renewed_at_half_their_lifetime():
    assert renewal_period_s({"token_expiration_min": "60"}) == 1800
    assert renewal_period_s({"token_expiration_min": "0.1"}) == 3
    assert renewal_period_s({}) == 1800  # TorchServe's own default of 60 minutes
