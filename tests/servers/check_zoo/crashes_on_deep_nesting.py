"""Bug: 100,000 nested brackets raise RecursionError in the decoder, which nothing catches."""

import json

from reference import Invalid, Server, _no_constants


class Buggy(Server):
    def decode(self, line):
        try:
            return json.loads(line.decode("utf-8"), parse_constant=_no_constants)
        except ValueError:  # RecursionError is not a ValueError: it ends the process
            raise Invalid(-32700, "Parse error") from None


if __name__ == "__main__":
    Buggy().serve()
