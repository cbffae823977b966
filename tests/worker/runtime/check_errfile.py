#!/usr/bin/env python3
"""check_errfile.py FILE MESSAGE [CALLSTACK_FRAGMENT] - reads an error file written by
libctworker the way torchrun does and checks it.

Always: json.load, the @record layout ({"message": {"message", "extraInfo": {"py_callstack",
"timestamp"}}}), the message text, an integer timestamp string, pure-ASCII bytes. When PyTorch
is importable: torch.distributed.elastic's ProcessFailure reads it and ChildFailedError's
report shows the message and the callstack, as torchrun's failure summary would. Prints
"torch: checked" or "torch: not available"; exits non-zero on any mismatch.
"""
import json
import sys


def main():
    path, message = sys.argv[1], sys.argv[2]
    fragment = sys.argv[3] if len(sys.argv) > 3 else None
    raw = open(path, "rb").read()
    raw.decode("ascii")  # ensure_ascii output, like Python's json.dump
    data = json.loads(raw)
    assert set(data) == {"message"}, data.keys()
    m = data["message"]
    assert set(m) == {"message", "extraInfo"}, m.keys()
    assert m["message"] == message, (m["message"], message)
    extra = m["extraInfo"]
    assert set(extra) == {"py_callstack", "timestamp"}, extra.keys()
    assert isinstance(extra["timestamp"], str) and int(extra["timestamp"]) > 1_600_000_000
    if fragment is not None:
        assert fragment in extra["py_callstack"], extra["py_callstack"]
    try:
        from torch.distributed.elastic.multiprocessing.errors import (ChildFailedError,
                                                                      ProcessFailure)
    except Exception:
        print("torch: not available")
        return
    failure = ProcessFailure(local_rank=0, pid=1234, exitcode=1, error_file=path)
    assert failure.message["message"] == message
    assert failure.timestamp == int(extra["timestamp"])
    report = ChildFailedError("worker", {0: failure}).format_msg()
    assert "error_file: " + path in report, report
    if fragment is not None:
        assert fragment in report, report
    print("torch: checked")


if __name__ == "__main__":
    main()
