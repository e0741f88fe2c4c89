"""The clients' network layer: gRPC channels per broker, cluster metadata, calls with retries."""

from odradek.net.channels import ChannelPool
from odradek.net.client import ClusterClient, ListedOffset
from odradek.net.metadata import Cluster, PartitionInfo, TopicInfo
from odradek.rpc_errors import rpc_error

__all__ = ["ChannelPool", "Cluster", "ClusterClient", "ListedOffset", "PartitionInfo", "TopicInfo", "rpc_error"]
