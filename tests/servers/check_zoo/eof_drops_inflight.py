"""Bug: exits on stdin EOF at once, dropping the replies of requests still in flight."""

import os
import time

from reference import Server


class Buggy(Server):
    def run_one(self, msg):
        time.sleep(0.005)  # a little work per request, so some are in flight at EOF
        super().run_one(msg)

    def on_eof(self):
        os._exit(0)


if __name__ == "__main__":
    Buggy().serve()
