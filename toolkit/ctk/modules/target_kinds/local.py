"""The local target's module kind (ctk/target/local): how the lab rehearses a cloud."""

from __future__ import annotations

from ..schema import Input, ModuleKind

KIND = ModuleKind(
    source="ctk/target/local",
    role="local-target",
    doc="How the lab (the local target) rehearses a cloud: random preemptions of Spot nodes, their notice, "
        "how long flex-start nodes wait for capacity and how long they run, how long a node takes to boot. The cluster stays on the local "
        "target.",
    inputs=(
        Input("chaos_interval", "number", 0,
            "Mean seconds between random preemptions of the lab's powered-up Spot nodes; 0: none."),
        Input("chaos_seed", "number", None, "Random seed of the preemptions; null: a new one each deploy."),
        Input("preemption_notice", "number", 30,
            "Seconds between a preemption notice and the SIGTERM of the node's processes (Google Cloud gives 30)."),
        Input("flex_start_delay", "number", 30,
            "Seconds a flex-start (dws_flex) nodeset's resumed nodes wait for capacity; below the "
            "partitions' ResumeTimeout."),
        Input("flex_run_duration", "number", None,
            "Seconds a flex-start node runs on the lab before its capacity is taken back (its jobs are "
            "requeued); null: the nodeset's dws_flex.max_run_duration (at least 600, as Cluster Toolkit "
            "requires). For rehearsing the take-back in minutes rather than hours."),
        Input("boot_delay", "number", 0,
            "Seconds a powered-up node takes to boot before its daemons start, as a cloud VM takes about a "
            "minute; with flex_start_delay, below the partitions' ResumeTimeout."),
        Input("user", "string", "researcher",
            "The lab's ordinary user account, on every node, owning /home/USER: ctk job and ctk env's Slurm "
            "commands run as it (ctk env --user root for an admin's)."),
        Input("user_uid", "number", 1900000,
            "uid and gid of the lab's user, the same on every node; between 1900000 and 1900099, numbers no "
            "host account has (ctk deploy checks)."),
    ),
    outputs=(),
)
