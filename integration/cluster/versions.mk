# Versions of what the local cluster builds: the one place they are set
# (env.sh reads this file too).
KUBE_VERSION ?= v1.36.3
CNI_PLUGINS_VERSION ?= v1.9.1
COREDNS_VERSION ?= v1.15.0
# flanneld, for make cluster-up CNI=flannel (its module: integration/flannel),
# and flannel's CNI plugin, from the last CNI plugins release that holds it
# (the proxy does not serve flannel-io/cni-plugin).
FLANNEL_VERSION ?= v0.28.4
FLANNEL_CNI_VERSION ?= v0.9.1
# The Go module version of Prometheus (v0.316.0 is Prometheus 3.16.0).
PROMETHEUS_VERSION ?= v0.316.0
# Helm, built from its Go module, for the charts' tests (deploy/charts).
HELM_VERSION ?= v4.3.1
# The previous Plexus, which the upgrade tests install and upgrade from
# (previous.sh): the last commit before the install-and-upgrade work.
PREVIOUS_COMMIT ?= 9581c7ee4158ed0435cf78e92a562b85465fef27
