"""Data for every host of every inventory in this folder."""

# Connect as a user that may read the kernel log and run nvidia-smi.
ssh_user = "gpuaudit"
