"""Third-party progress bars (tqdm, huggingface_hub) stay out of JSON logs, even when
stderr is a terminal; a person on a terminal with console logs still gets them."""

from __future__ import annotations

from tests.obs.tty import clean_env, run_with_tty_stderr

SCRIPT = """
import sys
from podserve.obs.logging import configure_logging, flush_logging
configure_logging(sys.argv[1])
import tqdm
for _ in tqdm.tqdm(range(3), desc="plain-tqdm"):
    pass
from huggingface_hub.utils import tqdm as hub_tqdm
for _ in hub_tqdm(range(3), desc="hub-tqdm"):
    pass
import logging
logging.getLogger("podserve.test").info("done")
flush_logging()
"""


def test_json_logs_on_a_terminal_get_no_bars() -> None:
    code, _, err = run_with_tty_stderr(["-c", SCRIPT, "json"], clean_env())
    assert code == 0, err
    assert "tqdm" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1
    assert '"msg":"done"' in lines[0]


def test_console_logs_on_a_terminal_keep_the_bars() -> None:
    code, _, err = run_with_tty_stderr(["-c", SCRIPT, "console"], clean_env())
    assert code == 0, err
    assert "plain-tqdm" in err
    assert "hub-tqdm" in err
