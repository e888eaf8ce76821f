"""What run.mjs starts for a function's worker: asks the twin's zygote (lambda_zygote.py) to fork
one with this process's stdin, stdout, stderr, environment and directory, then lives as long as
it does and exits with its exit code. Standard library only, started with -S: it costs a few
milliseconds where a worker started from scratch costs seconds.

usage: python -S lambda_spawn.py SOCKET_PATH HANDLER FUNCTION_ARN
"""

import json
import os
import socket
import sys


def main() -> int:
    path, argv = sys.argv[1], ["lambda_worker.py", *sys.argv[2:]]
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        socket.send_fds(conn, [(json.dumps(request) + "\n").encode()], [0, 1, 2])
        answer = b""
        while True:
            more = conn.recv(64)
            if not more:
                break
            answer += more
    try:
        return int(answer.decode().strip())
    except ValueError:
        sys.stderr.write("lambda_spawn: the worker ended without an exit code\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
