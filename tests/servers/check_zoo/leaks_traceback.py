"""Bug: leaks the traceback in the error's data (parse errors and failing methods)."""

import sys
import traceback

from reference import Invalid, Server


class Buggy(Server):
    def decode(self, line):
        try:
            return super().decode(line)
        except Invalid as exc:
            exc.data = traceback.format_exc()
            raise

    def parse_error_reply(self, exc):
        return self.error(exc.code, exc.message, None, getattr(exc, "data", None))

    def internal_error(self, msg, exc):
        return self.error(-32603, f"{type(exc).__name__}: {exc}", self.read_id(msg), traceback.format_exc())


if __name__ == "__main__":
    Buggy().serve()
    sys.exit(0)
