"""A model's tokenizer seen from outside (issue 30): accelnet_model_prompts_total counts how
balance: llm keyed each prompt of a model with a tokenizer (on tokens, or on text and why),
/status and /metrics say whether each tokenizer is up, degraded (no chat format: its chats
keyed on text) or failing, and GET /readyz answers 503 while one is failing, naming it, and
200 again by itself once its prompts tokenize again.

The failure is a real one a user can meet: a tokenizer.json whose Split pre-tokenizer
pattern backtracks without bound on some text (here "(?:a|aa)+b" on a run of a's): PCRE2
gives up at its match limit, and accelnet's encode fails, on that text only. Such failures
are the texts' (a client sending them must not make every replica unready): a tokenizer is
failing only when it fails on a plain text too, as one whose pattern gives up on any run of
40 or so characters does. Small tokenizer files written here (test_tokenize's tiny
byte-level BPE): no download."""

import json
import os
import re

from harness import metrics_text, prom_samples, request, status, wait_until

from test_tokenize import _tiny

# the pre-tokenizer that gives up on a run of a's, and tokenizes anything else
BACKTRACKS = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?:a|aa)+b|[^a]|a"}, "behavior": "Isolated",
     "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
     "use_regex": False}]}
BAD = "a" * 60  # ... such a run
# a pre-tokenizer that gives up on any run of 40 or so characters without a "!": on plain text
FAILS_PLAIN = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?:[^!]|[^!][^!])+!|[^!]|!"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
     "use_regex": False}]}
KEYED = ["tokens", "template_unknown", "content_unsupported", "prompt_unsupported",
         "encode_failed"]


def _models(env, fails_plain=False):
    """Two models: "bt" (the pre-tokenizer above, chat format llama3 by name) and "plain"
    (beside a tokenizer_config.json whose template accelnet does not know: degraded); with
    <fails_plain>, a third, "ft", whose tokenizer fails on plain text (FAILS_PLAIN)."""
    lines = ["models:"]
    ft = [("ft", _tiny(pre_tokenizer=FAILS_PLAIN), {}, "")] if fails_plain else []
    for name, doc, config, extra in [
            ("bt", _tiny(pre_tokenizer=BACKTRACKS),
             {"chat_template": "{{ messages }} a revision", "bos_token": "<s>"},
             ", chat_format: llama3"),
            ("plain", _tiny(), {"chat_template": "{{ messages }} not one accelnet knows"},
             "")] + ft:
        folder = os.path.join(env.dir, name)
        os.makedirs(folder)
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            json.dump(doc, f)
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
        lines.append(f"  {name}: {{tokenizer: {folder}/tokenizer.json, block_size: 2{extra}}}")
    return "\n".join(lines) + "\n"


def _proxy(env, extra="", fails_plain=False):
    sim = env.sim("s", latency_ms=1, jitter=0, tokens=1, token_ms=0)
    return env.proxy(_models(env, fails_plain) + "pools:\n  - name: gpu\n    balance: llm\n    backends:\n"
                     f"      - {{address: 127.0.0.1:{sim.port}}}\n", extra=extra)


def _post(px, model, path="/v1/completions", **body):
    st, _, _ = request(px.port, "POST", path, json.dumps({"model": model, "max_tokens": 1,
                                                          **body}),
                       {"Content-Type": "application/json"})
    assert st == 200, st


def _chat(px, model, messages):
    _post(px, model, "/v1/chat/completions", messages=messages)


def _model(admin, name):
    return next(m for m in status(admin)["models"] if m["name"] == name)


def _readyz(admin, headers=None):
    st, _, body = request(admin, "GET", "/readyz", headers=headers)
    return st, body.decode()


def test_prompts_counted_by_how_they_were_keyed(env):
    """Each prompt counted once, in the series a user's request makes move: a completion and
    a chat of a model with a chat format on tokens, a chat with a content part the format
    does not take, several prompts, a chat of a model whose template accelnet does not know,
    a text the tokenizer fails on; a body without a prompt not at all. /metrics and /status
    agree; /readyz is 200 and lists the degraded model; one failed prompt among a few is no
    failing tokenizer."""
    px = _proxy(env)
    st, body = _readyz(px.admin)
    assert (st, body) == (200, "ready\ndegraded: model plain's chats are keyed on text (its "
                          "chat template is not one accelnet knows)\n"), body
    hi = [{"role": "user", "content": "abc ab"}]
    _post(px, "bt", prompt="abc ab")
    _chat(px, "bt", hi)
    _chat(px, "bt", [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://example.com/x.png"}}]}])
    _post(px, "bt", prompt=["abc", "ab"])
    _post(px, "bt", prompt=BAD)
    _post(px, "bt", "/v1/embeddings", input="abc")  # no prompt: nothing keyed
    _chat(px, "plain", hi)
    _post(px, "plain", prompt="abc ab")
    _post(px, "other", prompt="abc ab")  # a model without a tokenizer: bytes, not counted
    want = {"bt": {"tokens": 2, "template_unknown": 0, "content_unsupported": 1,
                   "prompt_unsupported": 1, "encode_failed": 1},
            "plain": {"tokens": 1, "template_unknown": 1, "content_unsupported": 0,
                      "prompt_unsupported": 0, "encode_failed": 0}}
    got = prom_samples(metrics_text(px.admin))
    for model, counts in want.items():
        for keyed in KEYED:  # (counted before the request is sent on: answered, counted)
            assert got[("accelnet_model_prompts_total",
                        (("keyed", keyed), ("model", model)))] == counts[keyed], \
                (model, keyed)
    assert not [k for k in got if k[0] == "accelnet_model_prompts_total"
                and ("model", "other") in k[1]]
    assert got[("accelnet_model_tokenizer_up", (("model", "bt"),))] == 1
    assert got[("accelnet_model_tokenizer_up", (("model", "plain"),))] == 1
    assert got[("accelnet_model_tokenizer_degraded", (("model", "bt"),))] == 0
    assert got[("accelnet_model_tokenizer_degraded", (("model", "plain"),))] == 1
    models = status(px.admin)["models"]
    assert [m["name"] for m in models] == ["bt", "plain"]
    for m in models:
        assert m["prompts"] == want[m["name"]], m
    # the tick has seen the failed prompt (1 of 3 tried, too few to judge: up)
    wait_until(lambda: _model(px.admin, "bt")["window"]["failed"] == 1,
               "the window holding bt's failed prompt")
    bt, plain = _model(px.admin, "bt"), _model(px.admin, "plain")
    assert (bt["tokenizer"], bt["tokenizer_up"], bt["tokenizer_degraded"]) == \
        ("up", True, False), bt
    assert (plain["tokenizer"], plain["tokenizer_up"], plain["tokenizer_degraded"]) == \
        ("degraded", True, True), plain
    assert _readyz(px.admin)[0] == 200


def test_readyz_while_a_tokenizer_fails_and_after(env):
    """Most of ft's prompts fail to encode, and so does a plain text (its tokenizer gives up on
    any run of 40 or so characters without a "!"): within a tick /readyz answers 503 naming
    the model and its window (the admin endpoint), counting it (a data listener), the gauge is
    0 and /status says failing; the completions themselves are still answered (keyed on
    bytes). Its prompts tokenize again: /readyz is 200 by itself, without a restart."""
    px = _proxy(env, extra="probes: {listeners: true}\n", fails_plain=True)
    for i in range(12):
        _post(px, "ft", prompt="b" * 60 + "x" * i)
    wait_until(lambda: _readyz(px.admin)[0] == 503, "not ready: ft's tokenizer failing")
    st, body = _readyz(px.admin)
    # (the tick may come between two of the prompts: from 10 of 10 on)
    assert re.fullmatch(r"not ready: model ft's tokenizer is failing \((1[0-2]) of \1 prompts "
                        r"in the last 10 s could not be encoded\)\n", body), body
    assert "plain" not in body and "bt" not in body, body
    st, _, data = request(px.port, "GET", "/readyz")
    assert (st, json.loads(data)) == (503, {"status": "not ready",
                                            "reason": "1 model's tokenizer failing"}), data
    got = prom_samples(metrics_text(px.admin))
    assert got[("accelnet_model_tokenizer_up", (("model", "ft"),))] == 0
    assert got[("accelnet_model_tokenizer_up", (("model", "bt"),))] == 1
    assert _model(px.admin, "ft")["tokenizer"] == "failing"
    # its prompts tokenize again: three good for each bad in the window, or the bad ones aged
    # out of it; either way it comes back by itself (degraded: it has no chat format)
    for i in range(40):
        _post(px, "ft", prompt=f"abc {i}")
    wait_until(lambda: _readyz(px.admin)[0] == 200, "ready again")
    assert _model(px.admin, "ft")["tokenizer"] == "degraded"
    st, _, data = request(px.port, "GET", "/readyz")
    assert (st, json.loads(data))[0] == 200, data


def test_a_client_cannot_make_it_unready_with_texts_that_fail(env):
    """A client sends bt only texts its tokenizer gives up on (runs of a's): every replica
    with that file fails on them alike, so a 503 would only take every replica out of the
    load balancer together. bt's tokenizer still encodes a plain text, so the failures are
    the texts': counted (encode_failed, the window), keyed on bytes, and /readyz stays 200
    (before: 503 within a second, the attack a denial of service through the load
    balancer)."""
    px = _proxy(env, extra="probes: {listeners: true}\n")
    for i in range(12):
        _post(px, "bt", prompt=BAD + "x" * i)
    wait_until(lambda: _model(px.admin, "bt")["window"]["failed"] == 12,
               "the window holding bt's 12 failed prompts")
    assert _readyz(px.admin)[0] == 200, _readyz(px.admin)
    assert _model(px.admin, "bt")["tokenizer"] == "up"
    st, _, data = request(px.port, "GET", "/readyz")
    assert st == 200, data
    got = prom_samples(metrics_text(px.admin))
    assert got[("accelnet_model_tokenizer_up", (("model", "bt"),))] == 1
    assert got[("accelnet_model_prompts_total",
                (("keyed", "encode_failed"), ("model", "bt")))] == 12
    # The tick that first sees 10 (TOKHEALTH_MIN_TRIED) of the prompts judges and says so; a
    # slow machine may have taken 10, 11 or all 12 by then, every one of them failed.
    said = re.compile(r"models: bt: (1[0-2]) of \1 prompts in the last 10 s could not be "
                      r"encoded, but its tokenizer encodes a plain text")
    wait_until(lambda: said.search(env.log(px)), "the log saying so")
