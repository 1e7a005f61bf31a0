"""The DRA (Dynamic Resource Allocation) driver: the device inventory served to the kubelet's
DRA plugin API and published as ResourceSlices, answering NodePrepareResources with CDI names.

names: driver, node and device names; inventory: what the driver needs from the inventory;
slices: the node's pool as ResourceSlices; prepare: a claim's allocation to CDI names;
objects: DeviceClass and RBAC; api: the generated gRPC code; kubelet: registration and DRA
sockets; kube: the API server; publisher: slices following the inventory.
"""
