"""Every subcommand answers --help and -h with its usage on stdout and exit 0, starting
nothing, and still refuses an unknown option with a message on stderr and exit 2 (issue 14:
`accelnet sim --help` answered "unrecognized option")."""

import subprocess

from harness import BIN

# argv after the binary, and what the usage must name
COMMANDS = [
    (["proxy"], "accelnet proxy -c FILE"),
    (["check"], "accelnet check -c FILE"),
    (["sim"], "accelnet sim --listen ADDR"),
    (["demo"], "accelnet demo"),
    (["top"], "accelnet top [--admin HOST:PORT]"),
    (["xfer"], "accelnet xfer serve"),
    (["xfer", "serve"], "accelnet xfer serve --listen"),
    (["xfer", "send"], "accelnet xfer send PATH"),
    (["xfer", "get"], "accelnet xfer get HOST:PORT"),
    (["xfer", "bcast"], "accelnet xfer bcast PATH"),
]


def _run(*args):
    # a subcommand that started serving would not return: the timeout fails the test
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=10)


def test_every_subcommand_answers_help(env):
    for argv, names in COMMANDS:
        for flag in ("--help", "-h"):
            r = _run(*argv, flag)
            assert r.returncode == 0, (argv, flag, r.returncode, r.stderr)
            assert r.stdout.startswith("usage:"), (argv, flag, r.stdout)
            assert names in r.stdout, (argv, flag, r.stdout)
            assert r.stderr == "", (argv, flag, r.stderr)  # nothing logged: nothing started


def test_help_comes_before_the_required_options(env):
    """--help needs none of the options the subcommand otherwise requires, wherever it
    stands among the others."""
    r = _run("proxy", "--log-level", "debug", "--help")
    assert r.returncode == 0 and "accelnet proxy" in r.stdout and r.stderr == "", r
    r = _run("sim", "--name", "a", "-h")
    assert r.returncode == 0 and "accelnet sim" in r.stdout and r.stderr == "", r
    r = _run("xfer", "send", "some-file", "-h")
    assert r.returncode == 0 and "accelnet xfer send" in r.stdout and r.stderr == "", r


def test_top_level_help_points_to_subcommand_help(env):
    r = _run("help")
    assert r.returncode == 0 and "COMMAND --help" in r.stdout, r
    # each entry of `accelnet help` is the subcommand's own usage, from one table
    for argv, _ in COMMANDS[:5]:
        own = _run(*argv, "--help").stdout
        assert own.startswith("usage: accelnet ")
        assert "  accelnet " + own[len("usage: accelnet "):] in r.stdout, (argv, own)


def test_unknown_option_still_fails_with_a_message(env):
    for argv, names in COMMANDS:
        r = _run(*argv, "--frobnicate")
        assert r.returncode == 2, (argv, r.returncode, r.stdout, r.stderr)
        assert r.stdout == "", (argv, r.stdout)
        assert "frobnicate" in r.stderr, (argv, r.stderr)
        assert "usage:" in r.stderr, (argv, r.stderr)
    r = _run("sim", "--listen")
    assert r.returncode == 2 and "'--listen' requires an argument" in r.stderr, r
    r = _run("proxy", "--keys", "-c", "x.yaml")
    assert r.returncode == 2 and "--keys is for accelnet check" in r.stderr, r
