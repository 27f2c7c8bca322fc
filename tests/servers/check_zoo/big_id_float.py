"""Bug: integer ids beyond 2^53 come back as floats (what a float64 number type does)."""

from reference import Server


class Buggy(Server):
    def read_id(self, msg):
        id = msg["id"]
        if type(id) is int and abs(id) > 2**53:
            return float(id)
        return id


if __name__ == "__main__":
    Buggy().serve()
