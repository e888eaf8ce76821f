"""The set-up of one twin scenario and what its steps share: the stack deployed into the
emulator, its state machines (also in moto's Step Functions, where StartExecution lands), the
fault, the registered source, and the stack settings the fault overrides."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moto.stepfunctions.models import stepfunctions_backends

from .cfn import Deployment
from .deploy import deploy
from .emulator.faults import FaultList, StateFault, parse, state_faults
from .emulator.server import Emulator
from .execution import Machine, inlined, main_machine
from .execution import state_machines as template_state_machines
from .options import Options
from .source import Source, register

THROTTLED_CALLS = 2  # per function; the stack's Lambda retriers allow more attempts than this


@dataclass
class Context:
    emu: Emulator
    opts: Options
    d: Deployment
    machines: dict[str, Machine]
    main: Machine
    fault: StateFault | FaultList | str | None
    work: Path
    logdir: Path
    source: Source | None = None
    notes: list[str] = field(default_factory=list)
    env_overrides: dict[str, str] = field(default_factory=dict)
    throttled: int = 0
    trigger: dict[str, Any] = field(default_factory=dict)
    # FAULT=pending-delete-refused: the sweeper's runs past the direct snapshots' Timeout
    swept_later: list[dict[str, Any]] = field(default_factory=list)

    @property
    def state_faults(self) -> list[StateFault]:
        """The KIND@STATE faults of this run (FAULT=A+B gives several)."""
        return state_faults(self.fault)

    @property
    def registered(self) -> Source:
        """The source, once set-up registered it."""
        assert self.source is not None
        return self.source


def setup(emu: Emulator, opts: Options, fault: StateFault | FaultList | str | None, work: Path,
          logdir: Path) -> Context:  # fmt: skip
    emu.state.command_log_dir = logdir / "commands"
    d = deploy(emu, opts.cdk_out)
    machines = template_state_machines(d, opts.cdk_out)
    main = main_machine(d, machines, opts.cdk_out)
    if isinstance(fault, StateFault | FaultList):
        # raises FaultError naming the Task states (the launch attempt's too)
        parse(str(fault), inlined(main, machines).task_states())
    ctx = Context(emu, opts, d, machines, main, fault, work, logdir)
    if fault == "no-capacity":
        ctx.env_overrides = {"ALLOW_ON_DEMAND": "false"}
        ctx.notes.append(f"stack setting overridden for this fault: {ctx.env_overrides}")
    ctx.throttled = THROTTLED_CALLS if fault == "throttle" else 0
    _deploy_machines_into_moto(ctx)
    ctx.source = register(emu, opts, work)
    return ctx


def moto_state_machines(ctx: Context) -> list[Any]:
    """The state machines of moto's Step Functions in the deployment's account and region."""
    return list(stepfunctions_backends[ctx.d.account][ctx.d.region].state_machines)


def _deploy_machines_into_moto(ctx: Context) -> None:
    """StartExecution (the start_from_tag Lambda, EventBridge) lands in moto's Step Functions;
    the twin then runs each execution it finds there with the runner."""
    backend = stepfunctions_backends[ctx.d.account][ctx.d.region]
    existing = {sm.arn for sm in backend.state_machines}
    for machine in ctx.machines.values():
        if machine.arn not in existing:
            backend.create_state_machine(
                name=machine.name,
                definition=json.dumps(machine.definition),
                roleArn=f"arn:aws:iam::{ctx.d.account}:role/twin-state-machine",
            )
