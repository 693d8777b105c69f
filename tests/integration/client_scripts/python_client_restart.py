"""Run inside a virtualenv that has only tooljail-client, for the restart test.

    python_client_restart.py TARGET first   the call, with no retries: the daemon dies under it
    python_client_restart.py TARGET retry   the same tool_use twice, against the restarted daemon

Prints one JSON object of what it saw.
"""

import json
import sys

import tooljail

target, step = sys.argv[1], sys.argv[2]
CALL = {"command": "echo ran >> count.txt; sleep 3; echo after >> count.txt; echo done"}
seen: dict[str, object] = {}
with tooljail.Client(target, timeout=60, retries=0 if step == "first" else 2) as jail:
    if step == "first":
        try:
            answer = jail.execute("Bash", CALL, tool_use_id="toolu_restart")
            seen["error"] = None
            seen["text"] = answer.text
        except tooljail.TooljailError as error:
            seen["error"] = type(error).__name__
            seen["message"] = str(error)
    else:
        for attempt in ("retry", "again"):
            answer = jail.execute("Bash", CALL, tool_use_id="toolu_restart")
            seen[attempt] = {
                "is_error": answer.is_error,
                "text": answer.text,
                "replayed": answer.report.replayed,
            }
print(json.dumps(seen))
