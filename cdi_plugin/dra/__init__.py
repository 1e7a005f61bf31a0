"""The DRA (Dynamic Resource Allocation) driver: the device inventory served to the kubelet's
DRA plugin API and published as ResourceSlices, answering NodePrepareResources with CDI names.

names: driver, node, claim and device names; inventory: what the driver needs from the inventory;
slices: the node's pool as ResourceSlices; shapes: the API server's answers checked; prepare: a
claim's allocation to CDI names; health: the devices' health as the kubelet is told it; objects:
DeviceClass, RBAC and the admission policy; api: the generated gRPC code; service:
NodePrepareResources and NodeUnprepareResources; kubelet: registration and DRA sockets;
health_service: the kubelet's device health streams; preparedstate and prepared: the prepared
claims, as a document and on disk; serialize: the lock the driver's instances on a node share;
rolling: two instances side by side during an update; backoff: delays between attempts; rest:
requests to the API server; kube: what the driver asks of it; reflector: the node's slices kept by
a watch; publisher: slices following the inventory; report: what the driver reports to its metrics
and readiness.

Public names, each imported from its module on first use (gRPC only with the kubelet side, the
Kubernetes client only with the API server side):

* the pure core: ``Inventory``, ``check_driver_name``, ``check_node_name``, ``DraConfigError``,
  ``Pool``, ``build_pool``, ``Claim``, ``PreparedDevice``, ``prepare_claim``;
* the kubelet side: ``KubeletPlugin``, ``DraService``, ``Paths``;
* the API server side: ``KubeApi``, ``ApiServerError``, ``SlicePublisher``.
"""

from typing import TYPE_CHECKING

from cdi_plugin.lazy import exports

__all__ = [
    "ApiServerError",
    "Claim",
    "DraConfigError",
    "DraService",
    "Inventory",
    "KubeApi",
    "KubeletPlugin",
    "Paths",
    "Pool",
    "PreparedDevice",
    "SlicePublisher",
    "build_pool",
    "check_driver_name",
    "check_node_name",
    "prepare_claim",
]

if TYPE_CHECKING:
    from cdi_plugin.dra.inventory import Inventory
    from cdi_plugin.dra.kube import KubeApi
    from cdi_plugin.dra.kubelet import KubeletPlugin, Paths
    from cdi_plugin.dra.names import DraConfigError, check_driver_name, check_node_name
    from cdi_plugin.dra.prepare import Claim, PreparedDevice, prepare_claim
    from cdi_plugin.dra.publisher import SlicePublisher
    from cdi_plugin.dra.rest import ApiServerError
    from cdi_plugin.dra.service import DraService
    from cdi_plugin.dra.slices import Pool, build_pool
else:
    __getattr__ = exports(
        __name__,
        {
            "inventory": ["Inventory"],
            "kube": ["KubeApi"],
            "kubelet": ["KubeletPlugin", "Paths"],
            "service": ["DraService"],
            "names": ["DraConfigError", "check_driver_name", "check_node_name"],
            "prepare": ["Claim", "PreparedDevice", "prepare_claim"],
            "publisher": ["SlicePublisher"],
            "rest": ["ApiServerError"],
            "slices": ["Pool", "build_pool"],
        },
    )
