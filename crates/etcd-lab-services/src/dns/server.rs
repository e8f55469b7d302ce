//! The DNS server: answers from the current [`RecordTable`] over UDP and
//! TCP. Authoritative for the cluster domain only; it never forwards.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;

use super::records::{Lookup, RecordTable};

/// TTL of every answer, in seconds.
pub const TTL: u32 = 5;

/// Largest UDP answer for a client without EDNS (RFC 1035).
const CLASSIC_UDP_LIMIT: usize = 512;

/// Builds the answer to one request (pure). `udp` limits the size to what
/// the client accepts over UDP, truncating (TC) beyond it. Returns `None`
/// for messages that cannot be answered at all (not even an error).
pub fn respond(request: &[u8], table: &RecordTable, udp: bool) -> Option<Vec<u8>> {
    let request = match Message::from_vec(request) {
        Ok(message) => message,
        Err(_) => {
            // Answer FORMERR when at least the ID is readable.
            let id = u16::from_be_bytes([*request.first()?, *request.get(1)?]);
            return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                .to_vec()
                .ok();
        }
    };
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.recursion_available = false;
    response.add_queries(request.queries.iter().cloned());
    let limit = if udp {
        request.edns.as_ref().map_or(CLASSIC_UDP_LIMIT, |e| {
            usize::from(e.max_payload()).max(CLASSIC_UDP_LIMIT)
        })
    } else {
        usize::from(u16::MAX)
    };
    if let Some(edns) = &request.edns {
        let mut ours = hickory_proto::op::Edns::new();
        ours.set_max_payload(edns.max_payload().max(CLASSIC_UDP_LIMIT as u16));
        response.set_edns(ours);
    }
    let code = match (request.metadata.op_code, request.queries.as_slice()) {
        (OpCode::Query, [query]) => answer(query, table, &mut response),
        (OpCode::Query, _) => ResponseCode::FormErr,
        _ => ResponseCode::NotImp,
    };
    response.metadata.response_code = code;
    let bytes = response.to_vec().ok()?;
    if bytes.len() <= limit {
        return Some(bytes);
    }
    response.truncate().to_vec().ok()
}

/// Fills the answer for one question and returns the response code.
fn answer(
    query: &hickory_proto::op::Query,
    table: &RecordTable,
    response: &mut Message,
) -> ResponseCode {
    if query.query_class() != DNSClass::IN {
        return ResponseCode::Refused;
    }
    let name = query.name();
    match table.lookup(&name.to_ascii()) {
        Lookup::OutOfZone => ResponseCode::Refused,
        Lookup::NxDomain => {
            response.metadata.authoritative = true;
            add_soa(table, response);
            ResponseCode::NXDomain
        }
        Lookup::Found(addrs) => {
            response.metadata.authoritative = true;
            let wants_a = matches!(query.query_type(), RecordType::A | RecordType::ANY);
            if wants_a && !addrs.is_empty() {
                for addr in addrs {
                    response.add_answer(Record::from_rdata(name.clone(), TTL, RData::A(A(*addr))));
                }
            } else {
                add_soa(table, response);
            }
            ResponseCode::NoError
        }
    }
}

/// The zone's SOA in the authority section, for negative caching (RFC 2308).
fn add_soa(table: &RecordTable, response: &mut Message) {
    let domain = table.domain();
    let (Ok(zone), Ok(mname), Ok(rname)) = (
        Name::from_ascii(format!("{domain}.")),
        Name::from_ascii(format!("ns.dns.{domain}.")),
        Name::from_ascii(format!("hostmaster.{domain}.")),
    ) else {
        return;
    };
    let soa = SOA::new(mname, rname, 1, 7200, 1800, 86400, TTL);
    response.add_authority(Record::from_rdata(zone, TTL, RData::SOA(soa)));
}

/// Serves UDP queries until the socket fails.
pub async fn serve_udp(
    socket: UdpSocket,
    table: watch::Receiver<Arc<RecordTable>>,
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 4096];
    loop {
        let (len, peer) = socket.recv_from(&mut buffer).await?;
        let current = table.borrow().clone();
        if let Some(answer) = buffer.get(..len).and_then(|q| respond(q, &current, true))
            && let Err(e) = socket.send_to(&answer, peer).await
        {
            tracing::debug!(%peer, "dns: cannot answer: {e}");
        }
    }
}

/// Serves TCP connections (length-prefixed messages) until the listener
/// fails.
pub async fn serve_tcp(
    listener: TcpListener,
    table: watch::Receiver<Arc<RecordTable>>,
) -> std::io::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await?;
        let table = table.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, table).await {
                tracing::debug!(%peer, "dns: tcp connection: {e}");
            }
        });
    }
}

async fn serve_connection(
    mut stream: TcpStream,
    table: watch::Receiver<Arc<RecordTable>>,
) -> std::io::Result<()> {
    loop {
        let mut len = [0u8; 2];
        match stream.read_exact(&mut len).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut request = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut request).await?;
        let current = table.borrow().clone();
        let Some(answer) = respond(&request, &current, false) else {
            continue;
        };
        let Ok(answer_len) = u16::try_from(answer.len()) else {
            continue;
        };
        stream.write_all(&answer_len.to_be_bytes()).await?;
        stream.write_all(&answer).await?;
    }
}

/// Binds UDP and TCP on `listen`.
pub async fn bind(listen: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    let udp = UdpSocket::bind(listen).await?;
    let tcp = TcpListener::bind(listen).await?;
    Ok((udp, tcp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn table() -> RecordTable {
        let mut table = RecordTable::new("cluster.local");
        table.insert(
            "etcd-0.etcd.db.svc.cluster.local",
            Ipv4Addr::new(10, 244, 1, 10),
        );
        table
    }

    fn query(name: &str, record_type: RecordType) -> Vec<u8> {
        let mut message = Message::query();
        message.metadata.recursion_desired = true;
        let mut q = hickory_proto::op::Query::new();
        q.set_name(Name::from_ascii(name).unwrap())
            .set_query_type(record_type)
            .set_query_class(DNSClass::IN);
        message.add_query(q);
        message.to_vec().unwrap()
    }

    fn a_records(message: &Message) -> Vec<Ipv4Addr> {
        message
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn answers_known_names_authoritatively_with_short_ttl() {
        let bytes = respond(
            &query("etcd-0.etcd.db.svc.cluster.local.", RecordType::A),
            &table(),
            true,
        )
        .unwrap();
        let message = Message::from_vec(&bytes).unwrap();
        assert_eq!(message.metadata.response_code, ResponseCode::NoError);
        assert!(message.metadata.authoritative);
        assert!(!message.metadata.recursion_available);
        assert_eq!(a_records(&message), vec![Ipv4Addr::new(10, 244, 1, 10)]);
        assert_eq!(message.answers[0].ttl, TTL);
    }

    #[test]
    fn unknown_names_in_zone_are_nxdomain_and_other_types_nodata() {
        let bytes = respond(
            &query("etcd-9.etcd.db.svc.cluster.local.", RecordType::A),
            &table(),
            true,
        )
        .unwrap();
        let message = Message::from_vec(&bytes).unwrap();
        assert_eq!(message.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(message.authorities.len(), 1);
        let bytes = respond(
            &query("etcd-0.etcd.db.svc.cluster.local.", RecordType::AAAA),
            &table(),
            true,
        )
        .unwrap();
        let message = Message::from_vec(&bytes).unwrap();
        assert_eq!(message.metadata.response_code, ResponseCode::NoError);
        assert!(message.answers.is_empty());
    }

    #[test]
    fn names_outside_the_zone_are_refused() {
        let bytes = respond(&query("example.com.", RecordType::A), &table(), true).unwrap();
        let message = Message::from_vec(&bytes).unwrap();
        assert_eq!(message.metadata.response_code, ResponseCode::Refused);
        assert!(message.answers.is_empty());
    }

    #[test]
    fn garbage_gets_formerr_or_nothing() {
        let bytes = respond(&[0x12, 0x34, 0xff], &table(), true).unwrap();
        let message = Message::from_vec(&bytes).unwrap();
        assert_eq!(message.metadata.id, 0x1234);
        assert_eq!(message.metadata.response_code, ResponseCode::FormErr);
        assert_eq!(respond(&[0x12], &table(), true), None);
    }

    #[tokio::test]
    async fn real_udp_and_tcp_queries_see_table_updates() {
        let (udp, tcp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let udp_addr = udp.local_addr().unwrap();
        let tcp_addr = tcp.local_addr().unwrap();
        let (sender, receiver) = watch::channel(Arc::new(table()));
        tokio::spawn(serve_udp(udp, receiver.clone()));
        tokio::spawn(serve_tcp(tcp, receiver));

        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let ask = |name: &'static str| {
            let client = &client;
            async move {
                client
                    .send_to(&query(name, RecordType::A), udp_addr)
                    .await
                    .unwrap();
                let mut buffer = vec![0u8; 4096];
                let (len, _) =
                    tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buffer))
                        .await
                        .unwrap()
                        .unwrap();
                Message::from_vec(&buffer[..len]).unwrap()
            }
        };
        let message = ask("etcd-0.etcd.db.svc.cluster.local.").await;
        assert_eq!(a_records(&message), vec![Ipv4Addr::new(10, 244, 1, 10)]);
        assert_eq!(
            ask("etcd-1.etcd.db.svc.cluster.local.")
                .await
                .metadata
                .response_code,
            ResponseCode::NXDomain
        );

        let mut updated = table();
        updated.insert(
            "etcd-1.etcd.db.svc.cluster.local",
            Ipv4Addr::new(10, 244, 2, 10),
        );
        sender.send(Arc::new(updated)).unwrap();
        let message = ask("etcd-1.etcd.db.svc.cluster.local.").await;
        assert_eq!(a_records(&message), vec![Ipv4Addr::new(10, 244, 2, 10)]);

        let mut stream = TcpStream::connect(tcp_addr).await.unwrap();
        let request = query("etcd-1.etcd.db.svc.cluster.local.", RecordType::A);
        stream
            .write_all(&(request.len() as u16).to_be_bytes())
            .await
            .unwrap();
        stream.write_all(&request).await.unwrap();
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).await.unwrap();
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut answer).await.unwrap();
        let message = Message::from_vec(&answer).unwrap();
        assert_eq!(a_records(&message), vec![Ipv4Addr::new(10, 244, 2, 10)]);
    }
}
