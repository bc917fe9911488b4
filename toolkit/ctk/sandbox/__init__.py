"""Node primitives shared by image build nodes and lab nodes: a node booted from image layers
in its own namespaces (node, nodeinit), sshd and key pairs in it (sshd), free ports (net), and
munged / slurmctld / slurmd as child processes (daemons)."""

from ..errors import Failure


class DaemonError(Failure):
    """A daemon or node failed to start or to answer in time. (Here, not in daemons, so that
    running a command in a node imports no daemon code.)"""
