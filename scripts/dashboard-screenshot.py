#!/usr/bin/python3
"""Take a screenshot of /dashboard under the demo's traffic (docs/dashboard.png).

    scripts/dashboard-screenshot.py [--bin build/accelnet] [--seconds 40] [--out docs/dashboard.png]

Starts `accelnet demo` (it needs ports 8080, 8399 and 9101-9103 free), sends it completions
from a few clients (half of them streamed) for --seconds, opens the dashboard in headless
Chromium (Debian chromium) meanwhile, and saves the page as PNG. Stops everything it started.
Standard library only: run with Debian's /usr/bin/python3."""

import argparse
import http.client
import json
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402
from browser import Browser, chromium  # noqa: E402


def traffic(stop, i):
    body = {"prompt": "hello from the dashboard screenshot", "max_tokens": 16}
    if i % 2:
        body["stream"] = True
    while not stop.is_set():
        try:
            harness.complete(8080, json.dumps(body))
        except (OSError, http.client.HTTPException):  # the demo stopping under it
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "accelnet"))
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "dashboard.png"))
    a = ap.parse_args()
    if not chromium():
        sys.exit("no chromium: scripts/deps.sh installs Debian's chromium")
    env = harness.Env("dashboard-screenshot")
    stop = threading.Event()
    try:
        env.start([a.bin, "demo"], "demo", wait_port=8080)
        harness.wait_until(lambda: harness.port_open(8399), "the demo's admin port")
        threads = [threading.Thread(target=traffic, args=(stop, i), daemon=True)
                   for i in range(a.clients)]
        for t in threads:
            t.start()
        browser = Browser(env, width=1440, height=900)
        browser.open("http://127.0.0.1:8399/dashboard")
        time.sleep(a.seconds)  # the charts fill as the traffic goes on: a picture, not a test
        browser.screenshot(a.out)
        errors = browser.errors()
        browser.close()
        print(f"{a.out}: {os.path.getsize(a.out)} bytes; console errors: {len(errors)}")
        for e in errors:
            print("  " + e)
        return 1 if errors else 0
    finally:
        stop.set()
        env.cleanup()


if __name__ == "__main__":
    sys.exit(main())
