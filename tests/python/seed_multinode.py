# The seed's multi-node example as a TAO SDK user writes it. The only line changed is the import:
#   from tao_sdk.platforms.slurm import SlurmSDK
from tao_slurm import SlurmSDK

import json
import time

sdk = SlurmSDK()
job = sdk.create_job(
    image="nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
    command=(
        "torchrun --nnodes=$WORLD_SIZE --nproc-per-node=$NUM_GPU_PER_NODE --node-rank=$NODE_RANK "
        "--master-addr=$MASTER_ADDR --master-port=$MASTER_PORT train.py --epochs 1"
    ),
    gpu_count=8,
    num_nodes=4,
)
print(job.to_dict())
while True:
    status = sdk.get_job_status(job.id)
    if status.status in ("Complete", "Error", "Canceled"):
        break
    time.sleep(2)
print(json.dumps({"job_id": job.id, "status": status.status, "message": status.message,
                  "logs": sdk.get_job_logs(job.id)}))
