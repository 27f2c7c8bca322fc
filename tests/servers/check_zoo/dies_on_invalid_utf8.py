"""Bug: dies on invalid UTF-8 (the bytes are decoded outside the try that catches parse errors)."""

import json

from reference import Invalid, Server, _no_constants


class Buggy(Server):
    def decode(self, line):
        text = line.decode("utf-8")  # UnicodeDecodeError escapes and ends the process
        try:
            return json.loads(text, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            raise Invalid(-32700, "Parse error") from None


if __name__ == "__main__":
    Buggy().serve()
