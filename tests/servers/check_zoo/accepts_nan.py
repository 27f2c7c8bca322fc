"""Bug: accepts NaN and Infinity (Python's json.loads default), which are not JSON."""

import json

from reference import Invalid, Server


class Buggy(Server):
    def decode(self, line):
        try:
            return json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):
            raise Invalid(-32700, "Parse error") from None


if __name__ == "__main__":
    Buggy().serve()
