// Command mlms-dns is the dev cluster's DNS: CoreDNS, pinned by go.mod, with only the plugins
// its Corefile uses (mlmodelscope.devcluster.dns writes it). The kubernetes plugin answers
// <service>.<namespace>.svc.cluster.local from the API server, as in any cluster; names
// outside the cluster domain get NXDOMAIN from template, since nothing past this machine may
// be asked.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func init() {
	// The order plugins see a query in, as in CoreDNS's plugin.cfg.
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "kubernetes", "template"}
}

func main() { coremain.Run() }
