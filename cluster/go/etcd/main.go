// Builds etcd 3.6 from go.etcd.io/etcd/server/v3 for the local cluster (scripts/cluster.ts):
// Debian's etcd 3.4 is below Kubernetes' supported minimum. Same entry point as etcd's own server/main.go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
