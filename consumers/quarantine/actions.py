"""What an actuator is asked to do to a node on the scheduler (its own module: the factory in
`actuator` imports the Slurm and Kubernetes actuators, which need these names)."""

QUARANTINE = "quarantine"
RELEASE = "release"
