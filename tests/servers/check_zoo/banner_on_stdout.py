"""Bug: prints a startup banner on stdout, which is the protocol channel."""

from reference import Server

if __name__ == "__main__":
    print("zoo server 1.0 ready, listening on stdio", flush=True)
    Server().serve()
