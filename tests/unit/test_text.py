"""Text bound for protobuf, gRPC statuses and UTF-8 files, from names that are bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from daemon.calls.audit import AuditLog
from daemon.models import TextContent
from daemon.text import wire_safe


def test_bytes_that_are_not_utf8_show_as_escapes_and_the_rest_is_untouched() -> None:
    assert wire_safe(os.fsdecode(b"bad\xff\xfename")) == "bad\\xff\\xfename"
    assert wire_safe("plain é 漢字 \U0001f600") == "plain é 漢字 \U0001f600"
    assert wire_safe("lone \ud800 surrogate") == "lone \\ud800 surrogate"
    for text in (os.fsdecode(b"x\x80"), "a\udfffb"):
        wire_safe(text).encode("utf-8")  # never raises


def test_tool_result_text_is_always_valid_utf8() -> None:
    block = TextContent(text=os.fsdecode(b"u/bad\xff\n"))
    assert block.text == "u/bad\\xff\n"


def test_the_audit_keeps_a_record_whose_values_are_not_utf8(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "audit.jsonl"))
    log.write({"path": os.fsdecode(b"/w/bad\xff"), "n": 1})
    log.close()
    (line,) = (tmp_path / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    assert os.fsencode(json.loads(line)["path"]) == b"/w/bad\xff"
