// Command cert-manager-controller runs the cert-manager controllers that
// issue certificates from CA and self-signed issuers: the Issuer and
// ClusterIssuer controllers, the Certificate controllers, the
// CertificateRequest approver and the CA and self-signed signers. It wires
// them from the registry of github.com/cert-manager/cert-manager/pkg/controller
// the way cert-manager's own controller command does, without ACME, the
// webhook, the CA injector, leader election or the metrics server. No project
// logic lives here.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// The controllers register themselves with controllerpkg in init().
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// The issuer types that the Issuer and ClusterIssuer controllers set up
	// register themselves with pkg/issuer in init().
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the registry names of the controllers that run.
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
}

// workers per controller, cert-manager's default.
const workers = 5

func main() {
	klog.InitFlags(flag.CommandLine)
	kubeconfig := flag.String("kubeconfig", "", "path to the kubeconfig of the API server (required)")
	clusterResourceNamespace := flag.String("cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets that ClusterIssuers refer to")
	namespace := flag.String("namespace", "",
		"namespace to watch (default all; when set, ClusterIssuers are not served)")
	leaderElect := flag.Bool("leader-elect", false, "accepted for compatibility; only false is supported")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s --kubeconfig PATH [flags]\n\nRuns the controllers:\n", os.Args[0])
		for _, name := range controllers {
			fmt.Fprintf(flag.CommandLine.Output(), "  %s\n", name)
		}
		fmt.Fprintln(flag.CommandLine.Output())
		flag.PrintDefaults()
	}
	flag.Parse()
	if *kubeconfig == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *leaderElect {
		fmt.Fprintln(os.Stderr, "--leader-elect=true is not supported: run a single instance")
		os.Exit(2)
	}

	logf.InitLogs()
	defer logf.FlushLogs()

	if err := run(*kubeconfig, *clusterResourceNamespace, *namespace); err != nil {
		klog.ErrorS(err, "cert-manager-controller failed")
		logf.FlushLogs()
		os.Exit(1)
	}
}

func run(kubeconfig, clusterResourceNamespace, namespace string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	log := logf.FromContext(ctx)

	// cert-manager's defaults (internal/apis/config/controller/v1alpha1).
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          namespace,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: clusterResourceNamespace,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			CopiedAnnotationPrefixes: []string{
				"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/",
			},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}

	// Construct every controller first: each registers the informers it
	// needs with the shared factories, which start only afterwards.
	known := controllerpkg.Known()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, name := range controllers {
		if namespace != "" && name == clusterissuers.ControllerName {
			log.Info("not starting controller: scoped to one namespace", "controller", name)
			continue
		}
		constructor, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		iface, err := constructor(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %q: %w", name, err)
		}
		wg.Go(func() {
			log.Info("starting controller", "controller", name)
			if err := iface.Run(workers, ctx); err != nil {
				cancel(fmt.Errorf("controller %q: %w", name, err))
			}
		})
	}

	shared, err := factory.Build()
	if err != nil {
		cancel(err)
		wg.Wait()
		return fmt.Errorf("building the shared context: %w", err)
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	if shared.GatewaySolverEnabled {
		shared.GWShared.Start(ctx.Done())
	}
	log.Info("controllers started", "controllers", slices.DeleteFunc(slices.Clone(controllers), func(n string) bool {
		return namespace != "" && n == clusterissuers.ControllerName
	}))

	<-ctx.Done()
	log.Info("shutting down")
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
