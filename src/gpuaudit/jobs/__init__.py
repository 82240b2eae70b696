"""Collection run by a site's own scheduler: Slurm jobs and Kubernetes workloads."""
