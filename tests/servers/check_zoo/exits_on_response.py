"""Bug: exits when it receives a response object (a reply to nothing it sent is taken as fatal).

The check that sends responses is SHOULD-level; the crash it causes must still fail the run.
"""

import os

from reference import Server


class Buggy(Server):
    def dispatch_line(self, line):
        try:
            msg = self.decode(line)
        except Exception:
            msg = None
        if self.is_response(msg):
            os._exit(3)
        super().dispatch_line(line)


if __name__ == "__main__":
    Buggy().serve()
