// Command dnswhoami stands in for the CoreDNS pod of the Gateway API conformance suite's base
// manifests (registry.k8s.io/coredns/coredns, Corefile zone foo.bar.com with the whoami plugin):
// no image can be pulled in the test environment, and UDPRouteSimple only needs a DNS answer
// through the Gateway. It answers every query on UDP port 53 of every address of its network
// namespace with the asker's address: an A (or AAAA) record for the name asked, as whoami does.
package main

import (
	"log"
	"net"

	"github.com/miekg/dns"
)

func answer(w dns.ResponseWriter, query *dns.Msg) {
	reply := new(dns.Msg)
	reply.SetReply(query)
	reply.Authoritative = true
	if len(query.Question) == 1 {
		name := query.Question[0].Name
		header := dns.RR_Header{Name: name, Class: dns.ClassINET, Ttl: 0}
		if addr, ok := w.RemoteAddr().(*net.UDPAddr); ok {
			if ip4 := addr.IP.To4(); ip4 != nil {
				header.Rrtype = dns.TypeA
				reply.Answer = append(reply.Answer, &dns.A{Hdr: header, A: ip4})
			} else {
				header.Rrtype = dns.TypeAAAA
				reply.Answer = append(reply.Answer, &dns.AAAA{Hdr: header, AAAA: addr.IP})
			}
		}
	}
	if err := w.WriteMsg(reply); err != nil {
		log.Printf("dnswhoami: write: %v", err)
	}
}

func main() {
	server := &dns.Server{Addr: ":53", Net: "udp", Handler: dns.HandlerFunc(answer)}
	log.Printf("dnswhoami: serving UDP :53")
	log.Fatal(server.ListenAndServe())
}
