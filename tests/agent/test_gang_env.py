"""The gang's environment on the node (issue 24 item 2): the agent writes the MPI hostfile the server's
``gang`` describes and points ``E31_HOSTFILE`` at it; the torchrun line of SPEC §6 expands to the
rendezvous the server gave."""

from .test_agent import assignment, bundle_files, node, offer  # noqa: F401

TORCHRUN = ("torchrun --nnodes=$NNODES --node_rank=$NODE_RANK --nproc_per_node=$E31_GPUS_PER_NODE "
            "--master_addr=$MASTER_ADDR --master_port=$MASTER_PORT train.py")


def test_a_rank_reads_its_hostfile_and_its_torchrun_line_gets_the_rendezvous(node):  # noqa: F811
    server, _agent, _workdir = node
    job = assignment(50, f'cat "$E31_HOSTFILE" > hosts.txt; echo "$E31_HOSTFILE" > where.txt; '
                         f'echo {TORCHRUN} > torchrun.txt', outputs=["hosts.txt", "where.txt", "torchrun.txt"])
    job["env"] |= {"E31_NODE_RANK": "1", "NODE_RANK": "1", "NNODES": "2", "E31_GPUS_PER_NODE": "4",
                   "MASTER_ADDR": "node-a.example", "MASTER_PORT": "29550"}
    job["gang"] = [{"rank": 1, "host": "node-b.example", "gpus": 4}, {"rank": 0, "host": "node-a.example", "gpus": 4}]
    offer(server, job)
    assert server.state.wait_for(lambda: "finished" in server.state.types(50), 30)
    files = bundle_files(server, 50)
    assert files["hosts.txt"] == b"node-a.example slots=4\nnode-b.example slots=4\n"
    assert files["where.txt"].decode().strip().endswith("/.e31_hostfile")
    assert files["torchrun.txt"] == (b"torchrun --nnodes=2 --node_rank=1 --nproc_per_node=4 "
                                     b"--master_addr=node-a.example --master_port=29550 train.py\n")


def test_the_hostfile_is_never_an_output(node):  # noqa: F811
    server, _agent, _workdir = node
    job = assignment(51, "echo result > result.txt", outputs=["**"])
    job["gang"] = [{"rank": 0, "host": "node-a.example", "gpus": 1}]
    offer(server, job)
    assert server.state.wait_for(lambda: "finished" in server.state.types(51), 30)
    assert set(bundle_files(server, 51)) - {"manifest.json"} == {"result.txt"}
