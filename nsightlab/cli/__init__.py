"""The ``nsightlab`` command: a thin layer over the library.

Each subcommand lives in its own module, parses options, calls one library function and
hands the result to ``nsightlab.renderers.emit``. Each module lists its commands in
``COMMANDS`` and this package adds them to the root group (the modules never import it back);
they import pandas and the library inside the command, so ``nsightlab --help`` starts fast. Any NsightlabError becomes a one-line
``Error: ...`` and exit code 1; usage errors exit 2 (click's convention).
"""
from __future__ import annotations

import os
import sys

import click

from nsightlab.cli import capture, compare, info, recipe, report, table
from nsightlab.errors import NsightlabError, UsageError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Group(click.Group):
    """Root group that turns library errors into one-line messages."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UsageError as e:
            raise click.UsageError(str(e)) from None
        except NsightlabError as e:
            raise click.ClickException(str(e)) from None
        except BrokenPipeError:  # stdout closed early (| head): stop quietly, like SIGPIPE
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
        except OSError as e:  # an output folder that cannot be written, a full disk...
            where = f"{e.filename}: " if e.filename else ""
            raise click.ClickException(f"{where}{e.strerror or e}; check the path and its "
                                       "permissions") from None
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(130)


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="nsightlab")
def cli() -> None:
    """Turn NVIDIA Nsight profiles of GPU inference into answers.

    Capture a run (capture), look inside it (info, table), answer one question about it
    (recipe run), compare two runs (diff) or several (compare), summarize one (report), match
    TensorRT layers across engines (layers) or see where ONNX Runtime ran each node (ort).
    Reports are given as
    an nsys SQLite export (.sqlite or .sqlite.xz), a .nsys-rep (exported with nsys when it
    is installed), a capture directory, or a capture name in the store (./captures, or
    NSIGHTLAB_STORE).

    \b
    Examples:
      nsightlab capture fp16 --trtexec vit_fp16.onnx --precision fp16
      nsightlab diff captures/examples/vit-fp16 captures/examples/vit-fp8 --html diff.html
      nsightlab report captures/examples/vit-fp16
      nsightlab compare fp32 bf16 fp16 fp8 --fail-if 'latency_p50 > +5%'
      nsightlab recipe run launch_compute report.sqlite
      nsightlab info captures/examples/*/
      nsightlab table kernels report.sqlite --columns name,duration_ns --limit 10
    """
    from nsightlab.read import answer_cache

    answer_cache.new_command()  # each command says its warnings once (a process may run many)


for _module in (capture, compare, info, recipe, report, table):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main() -> None:
    """Console-script entry point. Leaves through ``leave``: the exit handlers run and the
    output is flushed, but the interpreter does not tear down what a big analysis left
    (modules, caches, arrays): ~0.1 s a command of nothing the user asked for."""
    from nsightlab.read import trace

    trace.mark("cli")
    code: int | str | None = 0
    try:
        cli(prog_name="nsightlab")
    except SystemExit as e:
        code = e.code
    finally:
        trace.mark("output written")
    leave(code)


def leave(code: int | str | None) -> None:
    """Exit now with ``code`` (as ``sys.exit`` reads it: None is 0, a text is printed and
    is 1), after the ``atexit`` handlers (reader processes closed, scratch folders removed)
    and with stdout and stderr flushed; no interpreter teardown."""
    import atexit

    if isinstance(code, str):
        print(code, file=sys.stderr)
    status = 0 if code is None else code if isinstance(code, int) else 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed, or a pipe whose reader left
                pass
        os._exit(status)
