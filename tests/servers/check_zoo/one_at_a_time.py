"""Quality issue: handles one request at a time (a slow request blocks every other one)."""

from concurrent.futures import ThreadPoolExecutor

from reference import Server


class Buggy(Server):
    def __init__(self):
        super().__init__()
        self.pool = ThreadPoolExecutor(max_workers=1)

    def handle_batch(self, batch):
        if not batch or len(batch) > 1000:
            return super().handle_batch(batch)
        self.write_batch([r for r in map(self.handle, batch) if r is not None])


if __name__ == "__main__":
    Buggy().serve()
