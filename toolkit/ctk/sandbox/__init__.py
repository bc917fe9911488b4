"""Node primitives shared by image build nodes and lab nodes: a node booted from image layers
in its own namespaces (node, nodeinit), sshd and key pairs in it (sshd), free ports (net), and
munged / slurmctld / slurmd as child processes (daemons)."""
